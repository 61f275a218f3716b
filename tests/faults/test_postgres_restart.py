"""F5: PostgreSQL restarted (``-m fast`` and ``-m immediate``) repeatedly under load.

Runs on a private throwaway cluster (``initdb`` into a temp dir, its own port), never on the
shared server. Bounded: ``12 s * IK_FAULT_SCALE`` of chaos.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from intention_kernel.durability.postgres import PostgresDurability

from .kit import (
    ProviderProcess,
    Report,
    TurnSpec,
    WorkerSpec,
    check_invariants,
    fault_scale,
    read_log,
    reporting,
    start_worker,
)


def _bin(name: str) -> str:
    for path in (shutil.which(name), f"/usr/lib/postgresql/15/bin/{name}"):
        if path and os.path.exists(path):
            return path
    pytest.skip(f"{name} is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A private PostgreSQL cluster run as the ``postgres`` OS user when we are root."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ik-pgcluster-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            os.chown(self.dir, pwd.getpwnam(self.user).pw_uid, -1)
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), user=self.user, capture_output=True, text=True, check=check, timeout=120
        )

    def init(self) -> None:
        self.run(_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-N")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.dir}'\nmax_connections = 40\n"
                "shared_buffers = 32MB\n"
            )
        self.pg_ctl("start")

    def pg_ctl(self, action: str, *extra: str) -> None:
        self.run(
            _bin("pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"), "-w", action, *extra
        )

    def destroy(self) -> None:
        self.run(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    _bin("initdb")
    c = Cluster()
    try:
        c.init()
        yield c
    finally:
        c.destroy()


def test_postgres_restarted_under_load(cluster: Cluster) -> None:
    dsn, schema = cluster.dsn, "ik_restart"

    async def setup() -> None:
        store = await PostgresDurability.open(dsn, schema=schema, setup=True, max_size=1)
        await store.close()

    asyncio.run(setup())
    chaos = 12.0 * fault_scale()
    log = os.path.join(tempfile.mkdtemp(prefix="ik-restart-"), "log.jsonl")
    rng = random.Random(1)
    with ProviderProcess(dsn, schema) as provider, reporting(Report("pg-restart")) as report:
        deadline = time.monotonic() + chaos
        specs = [
            WorkerSpec(
                dsn,
                schema,
                provider.socket,
                [
                    TurnSpec(f"r{w % 3}", f"w{w}-turn-{i}", (f"w{w}-k{i}",) if i % 2 else (), 200)
                    for i in range(100_000)
                ],
                log,
                lease_ttl=2.0,
                lock_timeout=30.0,
                deadline=deadline,
            )
            for w in range(4)
        ]
        workers = [start_worker(s) for s in specs]
        modes = ["fast", "immediate"]
        while time.monotonic() < deadline - 1:
            time.sleep(rng.uniform(1.0, 3.0))
            mode = modes[report.injections.total() % 2]
            cluster.pg_ctl("restart", "-m", mode)
            report.injections[f"restart -m {mode}"] += 1
        for w in workers:
            w.join(120)
            if w.is_alive():
                w.kill()
                report.add("I9", "a worker did not finish after the faults stopped")
        entries = read_log(log)
        outcomes = [r for r in entries if "outcome" in r]
        report.runs = len({(o["thread"], o["turn"]) for o in outcomes})
        final = {(o["thread"], o["turn"]): o for o in outcomes}
        report.figures["retried_errors"] = dict(
            Counter(o["code"] for o in outcomes if o["outcome"] == "error" and o.get("retryable"))
        )
        for key, o in final.items():
            if o["outcome"] == "error" and o.get("retryable"):
                report.add("I9", f"{key} never finished: {o['code']}")
        attempted = {(o["thread"], o["turn"]) for o in outcomes}
        planned = [t for s in specs for t in s.turns if (t.thread_id, t.turn_id) in attempted]
        asyncio.run(
            check_invariants(report, dsn, schema, provider.stats(), outcomes, planned=planned)
        )
    assert report.injections.total() >= 2
    assert report.total == 0
