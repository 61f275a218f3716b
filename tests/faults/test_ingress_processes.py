"""Turns from NATS JetStream and from Redis Streams through ``intention-kernel ingress``
processes, on one PostgreSQL store: 4 partitions, 3 ingress processes and 2 worker processes.
While the turns are being published, one ingress process is killed with ``kill -9`` and the
broker (a private ``nats-server`` or ``redis-server`` keeping its data on disk) is killed and
started again. Afterwards every published turn committed exactly once, and each thread's turns
committed in the order they were published.

CI publishes 12 threads x 8 turns; the README's fault command (``IK_FAULT_SCALE`` of 5 or more)
five times as many per thread.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from intention_kernel.contracts.inbox import RequestState
from intention_kernel.durability.factory import open_durability
from tests.ingress.support import (
    add_turns,
    ensure_stream,
    private_nats,
    private_redis,
    publish,
)
from tests.support.postgres import drop_schema, require_postgres, scratch_schema

from .kit import fault_scale

CLI = [sys.executable, "-m", "intention_kernel.cli"]
AGENT = "tests.ingress.agent:echo_agent"
THREADS = 12
PARTITIONS = "4"


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([*CLI, *argv], stdout=out, stderr=subprocess.STDOUT)


async def _all_committed(url: str, expected: int) -> dict[str, list[str]]:
    """Wait until ``expected`` requests are done; the committed turn ids per thread, in
    commit order."""
    store: Any = await open_durability(url)
    try:
        async with asyncio.timeout(120):
            while True:
                done = await store.inbox.list_requests(state=RequestState.DONE, limit=1000)
                if len(done) >= expected:
                    break
                await asyncio.sleep(0.2)
        everything = await store.inbox.list_requests(limit=1000)
        assert {r.state for r in everything} == {RequestState.DONE}, everything
        committed: dict[str, list[str]] = {}
        for thread in {r.thread_id for r in everything}:
            turns = await store.list_turns(thread, limit=1000)
            in_order = sorted(turns, key=lambda t: t.checkpoint.revision)
            committed[thread] = [t.turn_id for t in in_order]
        return committed
    finally:
        await store.close()


@pytest.mark.parametrize("broker_kind", ["nats", "redis"])
def test_turns_from_a_broker_commit_once_in_publish_order_through_kills_and_a_restart(
    tmp_path: Path, broker_kind: str
) -> None:
    dsn = require_postgres()
    schema = scratch_schema("ik_ingress")
    url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    per_thread = 8 * (5 if fault_scale() >= 5 else 1)
    turns = [
        (f"thread-{t}", f"thread-{t}-turn-{i}", f"message {i}")
        for i in range(per_thread)
        for t in range(THREADS)
    ]
    rng = random.Random()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        migrated = subprocess.run(
            [*CLI, "migrate", "--store", url], capture_output=True, text=True, timeout=60
        )
        assert migrated.returncode == 0, migrated.stderr
        private = private_nats if broker_kind == "nats" else private_redis
        with private(tmp_path) as broker:
            if broker_kind == "nats":
                broker_url = f"nats://127.0.0.1:{broker.port}"
                asyncio.run(ensure_stream(broker_url))
                send: Any = publish
            else:
                broker_url = f"redis://127.0.0.1:{broker.port}/0"
                send = add_turns
            for n in range(3):
                processes.append(
                    _start(
                        [
                            "ingress",
                            broker_url,
                            "--agent",
                            AGENT,
                            "--store",
                            url,
                            "--partitions",
                            PARTITIONS,
                            "--ack-wait",
                            "2",
                        ],
                        tmp_path / f"ingress-{n}.log",
                    )
                )
            for n in range(2):
                processes.append(
                    _start(
                        [
                            "worker",
                            "--agent",
                            AGENT,
                            "--store",
                            url,
                            "--claim-ttl",
                            "2",
                            "--poll",
                            "0.1",
                        ],
                        tmp_path / f"worker-{n}.log",
                    )
                )

            async def stream_with_faults() -> None:
                kill_at = rng.randrange(len(turns) // 6, len(turns) // 3)
                restart_at = rng.randrange(len(turns) // 2, 2 * len(turns) // 3)
                await send(broker_url, turns[:kill_at], int(PARTITIONS), pause=0.01)
                os.kill(processes[0].pid, signal.SIGKILL)  # an ingress, mid-stream
                await send(broker_url, turns[kill_at:restart_at], int(PARTITIONS), pause=0.01)
                broker.stop()  # kill -9 of the broker, then back on its port and its store
                await asyncio.sleep(1.0)
                broker.start()
                await send(broker_url, turns[restart_at:], int(PARTITIONS), pause=0.01)

            asyncio.run(stream_with_faults())
            committed = asyncio.run(_all_committed(url, len(turns)))
            for process in processes[1:]:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                process.wait(60)
            assert processes[0].returncode == -signal.SIGKILL
            assert all(p.returncode == 0 for p in processes[1:]), [
                (p.returncode, (tmp_path / f"ingress-{n}.log").read_text()[-2000:])
                for n, p in enumerate(processes[1:3], start=1)
            ]
        published: dict[str, list[str]] = {}
        for thread, turn_id, _ in turns:
            published.setdefault(thread, []).append(turn_id)
        assert committed == published  # each turn once, in publish order per thread
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        asyncio.run(drop_schema(dsn, schema))
