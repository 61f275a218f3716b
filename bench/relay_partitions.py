"""Partitioned outbox relays over PostgreSQL: 1 relay process against N processes that share
the threads (``--partition i/N``) and N that compete for them (no partitions), draining the same
backlog, side by side in one run.

    .venv/bin/python bench/relay_partitions.py [--events 30000] [--relays 3] [--repeat 3]

A backlog of ``--events`` committed events (5 per turn, 50 threads, written once with 4
writers through the store) in a scratch schema; before each side its delivery state is reset
and the table vacuumed, so every side drains the same rows from the same state. Each relay is
its own process (``_relay_process.py``, batch 200, file sink with an ``fsync`` per batch, one
file per process): all start, open their store and sink, say ready, and are started together;
the time is from the start to an empty backlog (polled every 5 ms). Sides alternate within a
repetition (forward, then backward), after one untimed drain that warms the server up; the
ratio to one relay is taken within a repetition, then the median. ``machine busy`` is the share
of both cores in use during the drain (``/proc/stat``: PostgreSQL, the relays and this script's
5 ms probe).

``--even`` names the 50 threads so that the store's hash splits them evenly among the relays
(17/17/16 for 3, picked from ``t0``..``t999`` by ``hashtext``) instead of ``t0``..``t49`` (which
it splits 12/24/14), to tell what the relays do from what the hash gives them; its results go
to ``bench/results/relay_partitions_even.json``.

Per-thread order is checked after every side: each sink file's events of a thread must come in
(turn, sequence) order, and every event must be delivered (duplicates are allowed: delivery is
at least once, and counted).

Prints a table and writes ``bench/results/relay_partitions.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _relay_common import commit_turn, postgres_dsn, scratch_schema

from intention_kernel.durability.postgres import PostgresDurability, drop_schema
from intention_kernel.durability.postgres._outbox_sql import partition_of

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "relay_partitions.json"
THREADS = 50
PER_TURN = 5


async def thread_names(dsn: str, relays: int, *, even: bool) -> list[str]:
    """``t0``..``t49``, or (``even``) 50 names the store's partition hash spreads evenly over
    ``relays`` partitions: the first names of ``t0``..``t999`` in each partition."""
    if not even:
        return [f"t{n}" for n in range(THREADS)]
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        part = partition_of(relays, "('t' || n)")
        rows = await conn.fetch(
            f"SELECT 't' || n AS name, {part} AS part FROM generate_series(0, 999) AS n ORDER BY n"
        )
    finally:
        await conn.close()
    names: list[str] = []
    for part in range(relays):
        share = THREADS // relays + (1 if part < THREADS % relays else 0)
        names += [r["name"] for r in rows if r["part"] == part][:share]
    return names


async def write_backlog(dsn: str, schema: str, events: int, names: list[str]) -> None:
    store = await PostgresDurability.open(dsn, schema=schema, setup=True, max_size=8)
    try:
        turns = events // (THREADS * PER_TURN)

        async def write(part: int) -> None:
            for turn in range(turns):
                for thread in range(part, THREADS, 4):
                    await commit_turn(store, names[thread], f"turn-{turn:05d}", PER_TURN)

        await asyncio.gather(*(write(p) for p in range(4)))
    finally:
        await store.close()


async def reset(dsn: str, schema: str) -> int:
    """Every event pending again, no claims, no leases; the table vacuumed."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        s = f'"{schema}"'
        await conn.execute(
            f"UPDATE {s}.outbox SET delivered_at = NULL, claimed_by = NULL,"
            " claimed_until = NULL, attempts = 0, next_attempt_at = NULL, dead = false"
        )
        await conn.execute(f"DELETE FROM {s}.relay_partitions")
        await conn.execute(f"VACUUM ANALYZE {s}.outbox")
        count: int = await conn.fetchval(f"SELECT count(*) FROM {s}.outbox")
        return count
    finally:
        await conn.close()


async def drain(
    dsn: str, schema: str, relays: int, directory: Path, *, partitioned: bool
) -> dict[str, Any]:
    """Start ``relays`` processes together (each with its own share when ``partitioned``) and
    time the drain of the whole backlog."""
    total = await reset(dsn, schema)
    url = f"{dsn}?schema={schema}"
    files = [directory / f"relays{relays}-{n}-{time.monotonic_ns()}.jsonl" for n in range(relays)]
    procs = []
    for n, path in enumerate(files):
        argv = [sys.executable, str(HERE / "_relay_process.py"), url, path.as_uri()]
        if partitioned:
            argv.append(f"{n}/{relays}")
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
        procs.append(subprocess.Popen(argv, text=True, **pipes))  # noqa: ASYNC220 - before timing
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        cpu_before, machine_before = os.times(), busy_jiffies()
        started = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        import asyncpg

        conn = await asyncpg.connect(dsn)
        try:
            # One probe of the undelivered rows' index (a count would scan the backlog).
            query = f'SELECT EXISTS (SELECT 1 FROM "{schema}".outbox WHERE delivered_at IS NULL)'
            while await conn.fetchval(query):  # noqa: ASYNC110 - polls the store
                await asyncio.sleep(0.005)
        finally:
            await conn.close()
        elapsed = time.perf_counter() - started
        cpu_after, machine_after = os.times(), busy_jiffies()
    finally:
        for proc in procs:
            proc.terminate()
        reports = [
            json.loads(proc.communicate(timeout=60)[0].strip().splitlines()[-1]) for proc in procs
        ]
    children = (cpu_after.children_user + cpu_after.children_system) - (
        cpu_before.children_user + cpu_before.children_system
    )
    delivered, duplicates = check_order(files, total)
    return {
        "side": side_name(relays, partitioned),
        "relays": relays,
        "partitioned": partitioned,
        "events": total,
        "seconds": round(elapsed, 3),
        "events_per_second": round(total / elapsed),
        "delivered_by_process": [r["delivered"] for r in reports],
        "duplicates": duplicates,
        "unique_delivered": delivered,
        "relay_cpu_seconds_reported": round(children, 2),
        "machine_busy": round(
            (machine_after[0] - machine_before[0]) / max(1, machine_after[1] - machine_before[1]),
            2,
        ),
    }


def side_name(relays: int, partitioned: bool) -> str:
    return (
        "1 relay"
        if relays == 1
        else f"{relays} relays, {'partitioned' if partitioned else 'competing'}"
    )


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) CPU jiffies of the whole machine, from ``/proc/stat``."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def check_order(files: list[Path], total: int) -> tuple[int, int]:
    """Every event delivered; within each file a thread's events in (turn, sequence) order."""
    seen: set[str] = set()
    duplicates = 0
    for path in files:
        last: dict[str, tuple[str, int]] = defaultdict(lambda: ("", -1))
        for line in path.read_text().splitlines():
            event = json.loads(line)
            key = (event["turn_id"], event["sequence"])
            thread = event["thread_id"]
            if key < last[thread]:
                raise AssertionError(
                    f"{path.name}: {thread} went back from {last[thread]} to {key}"
                )
            last[thread] = key
            if event["id"] in seen:
                duplicates += 1
            seen.add(event["id"])
    if len(seen) != total:
        raise AssertionError(f"{len(seen)} of {total} events delivered")
    return len(seen), duplicates


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=postgres_dsn())
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--relays", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--even", action="store_true", help="threads the hash splits evenly")
    args = parser.parse_args()
    results = RESULTS.with_name("relay_partitions_even.json") if args.even else RESULTS
    schema = scratch_schema("ik_bench_partitions")
    directory = Path(tempfile.mkdtemp(prefix="ik-relay-partitions-"))
    runs: list[dict[str, Any]] = []
    ratios: dict[str, list[float]] = {}
    load = os.getloadavg()[0]
    try:
        names = await thread_names(args.dsn, args.relays, even=args.even)
        await write_backlog(args.dsn, schema, args.events, names)
        sides = [(1, False), (args.relays, True), (args.relays, False)]
        # Not timed: the first drain after the backlog is written runs slower (1 relay: 13-14k
        # events/s, then 16-17k), which favoured whichever side came first.
        await drain(args.dsn, schema, 1, directory, partitioned=False)
        for rep in range(args.repeat):
            found: dict[str, dict[str, Any]] = {}
            for relays, partitioned in sides if rep % 2 == 0 else sides[::-1]:
                run = await drain(args.dsn, schema, relays, directory, partitioned=partitioned)
                run["repetition"] = rep
                runs.append(run)
                found[run["side"]] = run
                print(
                    f"rep {rep} {run['side']:>24}: {run['events_per_second']:>6} ev/s"
                    f" ({run['seconds']} s, by process {run['delivered_by_process']},"
                    f" duplicates {run['duplicates']}, machine busy {run['machine_busy']})",
                    file=sys.stderr,
                )
            base = found[side_name(1, False)]["events_per_second"]
            for name, run in found.items():
                ratios.setdefault(name, []).append(run["events_per_second"] / base)
    finally:
        await drop_schema(args.dsn, schema)
    summary = {
        name: {
            "events_per_second": round(
                statistics.median(r["events_per_second"] for r in runs if r["side"] == name)
            ),
            "ratio_to_one_relay": round(statistics.median(values), 2),
            "ratios": [round(v, 2) for v in values],
            "machine_busy": statistics.median(r["machine_busy"] for r in runs if r["side"] == name),
        }
        for name, values in ratios.items()
    }
    print()
    print(f"{'side':>26} {'ev/s (median)':>14} {'ratio':>6} {'busy':>5}")
    for name, row in summary.items():
        print(
            f"{name:>26} {row['events_per_second']:>14} {row['ratio_to_one_relay']:>5.2f}x"
            f" {row['machine_busy']:>5}"
        )
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(
        json.dumps(
            {
                "benchmark": "relay_partitions",
                "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": {
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "load_at_start": round(load, 2),
                },
                "threads": THREADS,
                "thread_names": "split evenly by the hash" if args.even else "t0..t49",
                "per_turn": PER_TURN,
                "events": args.events,
                "batch_size": 200,
                "sides": summary,
                "runs": runs,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {results}")


if __name__ == "__main__":
    asyncio.run(main())
