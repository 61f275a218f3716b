"""What a read replica takes off the primary (not a timed test; a few seconds).

    .venv/bin/python bench/replica_reads.py [--turns 200] [--clients 8] [--seconds 3]

A primary and an asynchronous streaming standby of its own (``tests.support.pg_cluster``: free
loopback ports, removed at the end). ``--turns`` turns are committed on the primary (one per
thread, through ``commit_simple``), the standby catches up, then, for a store on the primary
alone and for one with ``read_url`` naming the standby:

- a replay of each committed turn, one after the other: milliseconds per replay (median, p95)
  and the statements the primary ran for them, counted in its own statement log
  (``log_statement = all``; the turn path of the store names its schema in every statement);
- ``--clients`` tasks replaying for ``--seconds``: replays per second, and the primary's CPU
  (``/proc`` of its backends, so the standby's work is not counted);
- new turns, one after the other: milliseconds per turn (the read pool costs one SELECT on the
  standby before the primary's acquire).

Loopback on one machine: both servers share its cores, so the throughput says what moves off
the primary, not what a second machine would add. Writes ``bench/results/replica_reads.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from intention_kernel.durability.factory import open_durability
from intention_kernel.testing.conformance import commit_simple
from tests.support.pg_cluster import Node, primary_and_standby

SCHEMA = "ik_replica_bench"
RESULTS = Path(__file__).resolve().parent / "results" / "replica_reads.json"


def dsn(node: Node) -> str:
    return f"postgresql://postgres@127.0.0.1:{node.port}/postgres"


def statements_since(node: Node, start: int) -> int:
    with open(node.log, encoding="utf-8", errors="replace") as log:
        log.seek(start)
        entries = re.split(r"\n(?=\d{4}-\d\d-\d\d )", log.read())
    return sum(
        1
        for e in entries
        if ("LOG:  statement: " in e or "LOG:  execute " in e) and f'"{SCHEMA}"' in e
    )


def backend_cpu(node: Node) -> float:
    """CPU seconds of the server's processes (the postmaster's children)."""
    pid = node.pid()
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for child in Path("/proc").iterdir():
        if not child.name.isdigit():
            continue
        try:
            fields = (child / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # ppid
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


async def caught_up(primary: Node, standby: Node) -> None:
    source, replica = await asyncpg.connect(dsn(primary)), await asyncpg.connect(dsn(standby))
    try:
        lsn = await source.fetchval("SELECT pg_current_wal_lsn()")
        for _ in range(1000):
            if await replica.fetchval("SELECT pg_last_wal_replay_lsn() >= $1", lsn):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the standby did not catch up in 10 s")
    finally:
        await source.close()
        await replica.close()


def quantiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 3),
    }


async def side(
    url: str, primary: Node, turns: int, clients: int, seconds: float, fresh: str
) -> dict[str, Any]:
    store = await open_durability(url, max_size=clients)
    try:
        start = primary.log.stat().st_size
        times = []
        for n in range(turns):
            began = time.perf_counter()
            _, _, replayed = await commit_simple(store, f"t{n}", "turn-1")
            times.append(time.perf_counter() - began)
            assert replayed
        figures: dict[str, Any] = {"replay": quantiles(times)}
        figures["primary_statements_per_replay"] = statements_since(primary, start) / turns
        done = 0
        stop = time.monotonic() + seconds

        async def client(k: int) -> None:
            nonlocal done
            n = k
            while time.monotonic() < stop:
                await commit_simple(store, f"t{n % turns}", "turn-1")
                done += 1
                n += clients

        cpu = backend_cpu(primary)
        began = time.perf_counter()
        await asyncio.gather(*(client(k) for k in range(clients)))
        elapsed = time.perf_counter() - began
        figures["replays_per_second"] = round(done / elapsed)
        figures["primary_cpu_ms_per_replay"] = round(
            (backend_cpu(primary) - cpu) * 1000 / max(done, 1), 4
        )
        times = []
        for n in range(min(turns, 100)):
            began = time.perf_counter()
            await commit_simple(store, f"{fresh}{n}", "turn-1")
            times.append(time.perf_counter() - began)
        figures["new_turn"] = quantiles(times)
        return figures
    finally:
        await store.close()


async def measure(primary: Node, standby: Node, args: argparse.Namespace) -> dict[str, Any]:
    writer = await open_durability(f"{dsn(primary)}?schema={SCHEMA}", setup=True, max_size=8)
    try:
        for n in range(args.turns):
            await commit_simple(writer, f"t{n}", "turn-1")
    finally:
        await writer.close()
    await caught_up(primary, standby)
    plain = f"{dsn(primary)}?schema={SCHEMA}"
    replica = f"{plain}&read_url={quote(dsn(standby), safe='')}"
    return {
        "turns": args.turns,
        "clients": args.clients,
        "primary_only": await side(
            plain, primary, args.turns, args.clients, args.seconds, "new-a-"
        ),
        "read_url": await side(replica, primary, args.turns, args.clients, args.seconds, "new-b-"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    with primary_and_standby(synchronous=False) as (primary, standby, _):
        for node in (primary, standby):
            node.sql("ALTER SYSTEM SET log_statement = 'all'")
            node.sql("SELECT pg_reload_conf()")
        figures = asyncio.run(measure(primary, standby, args))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
