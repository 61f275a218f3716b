"""Outbox relay under a backlog: does draining slow down as the backlog grows?

    .venv/bin/python bench/relay_backlog.py [--dsn URL] [--backlog 20000] [--repeat 3]

The situation after a broker outage: a store with a delivered history whose statistics were
taken while nothing was pending (``ANALYZE`` after the history, autovacuum off on the outbox
so they stay that way, as they do until autovacuum next analyzes), then a backlog of N events
on 4 threads queued while the sink was down. One relay (batch 100) drains it into an in-memory
sink, so the figure is the store's claim and mark cost, not a broker's.

* ``drain``: events/s to drain a 1,000-event backlog (the near-empty store) and an N-event
  backlog, PostgreSQL and SQLite (median of ``--repeat``, the sizes interleaved), their ratio,
  and the mean claim and mark times (a PostgreSQL drain starts after a ``CHECKPOINT``, so the
  queueing's writes are not flushed during one size's drain and not the other's);
* ``claim``: milliseconds of the first claim at each backlog; for PostgreSQL also the claim
  statement this release replaced (``PREVIOUS_CLAIM``, up to ``--previous-max`` events: it
  grew with the square of the backlog), which reproduces the regression.

Prints a table and writes ``bench/results/relay_backlog.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import asyncpg
from _relay_common import commit_turn, postgres_dsn, scratch_schema

from intention_kernel.contracts import DurabilityStore
from intention_kernel.contracts.outbox import OutboxSource
from intention_kernel.durability.postgres import PostgresDurability, drop_schema
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.relay import OutboxRelay
from intention_kernel.testing import EventCollector

RESULTS = Path(__file__).parent / "results" / "relay_backlog.json"
THREADS = 4
PER_TURN = 50
BATCH = 100
HISTORY = 4_000
SMALL = 1_000

PREVIOUS_CLAIM = """
WITH candidates AS (
    SELECT o.position, o.thread_id FROM {s} o
    WHERE o.delivered_at IS NULL AND NOT o.dead
      AND (o.claimed_until IS NULL OR o.claimed_until <= now())
      AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
      AND NOT EXISTS (
          SELECT 1 FROM {s} b
          WHERE b.thread_id = o.thread_id AND b.position < o.position
            AND b.delivered_at IS NULL
            AND (b.dead OR b.claimed_until > now() OR b.next_attempt_at > now()))
    ORDER BY o.position
    LIMIT $2
    FOR UPDATE OF o SKIP LOCKED
), chosen AS (
    SELECT c.position FROM candidates c
    WHERE NOT EXISTS (
        SELECT 1 FROM {s} e
        WHERE e.thread_id = c.thread_id AND e.position < c.position
          AND e.delivered_at IS NULL
          AND NOT EXISTS (SELECT 1 FROM candidates k WHERE k.position = e.position))
)
UPDATE {s} u SET claimed_by = $1, claimed_until = now() + make_interval(secs => $3::float8)
FROM chosen WHERE u.position = chosen.position
RETURNING u.position"""
"""The PostgreSQL claim before the position-order walk, kept to reproduce its cost."""


async def queue(store: DurabilityStore, events: int, prefix: str) -> None:
    """``events`` outbox events on ``THREADS`` threads, one writer per thread."""
    turns = events // (THREADS * PER_TURN)

    async def write(thread: int) -> None:
        for turn in range(turns):
            await commit_turn(store, f"t{thread}", f"{prefix}-{turn:05d}", PER_TURN)

    await asyncio.gather(*(write(t) for t in range(THREADS)))


class Timed:
    """The store as the relay's source, adding up the time of its claims and marks."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.claims: list[float] = []
        self.marks: list[float] = []

    async def claim(self, relay_id: str, *, limit: int, lease: float) -> list[Any]:
        started = time.perf_counter()
        batch: list[Any] = await self.store.claim(relay_id, limit=limit, lease=lease)
        self.claims.append(time.perf_counter() - started)
        return batch

    async def mark_delivered(self, relay_id: str, positions: list[int]) -> int:
        started = time.perf_counter()
        marked: int = await self.store.mark_delivered(relay_id, positions)
        self.marks.append(time.perf_counter() - started)
        return marked

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def drain(store: Any) -> dict[str, float]:
    """One relay delivers everything pending: elapsed seconds, mean claim and mark times."""
    timed = Timed(store)
    relay = OutboxRelay(
        cast(OutboxSource, timed), EventCollector(), batch_size=BATCH, poll_interval=0.01
    )
    started = time.perf_counter()
    while (await relay.run_once()).claimed:
        pass
    elapsed = time.perf_counter() - started
    assert (await store.outbox_stats()).pending == 0
    return {
        "seconds": elapsed,
        "claim_ms": 1000 * statistics.mean(timed.claims),
        "mark_ms": 1000 * statistics.mean(timed.marks) if timed.marks else 0.0,
    }


async def first_claim_ms(store: Any) -> float:
    started = time.perf_counter()
    batch = await store.claim("bench-probe", limit=BATCH, lease=600)
    elapsed = (time.perf_counter() - started) * 1000
    await store.release("bench-probe", [e.position for e in batch])
    return elapsed


class Postgres:
    name = "postgresql"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.schema = ""

    async def healthy(self) -> PostgresDurability:
        """A scratch schema with a delivered history, analyzed, autovacuum off on the outbox."""
        self.schema = scratch_schema("ik_bench_backlog")
        store = await PostgresDurability.open(
            self.dsn, schema=self.schema, setup=True, min_size=1, max_size=THREADS + 1
        )
        await queue(store, HISTORY, "history")
        await drain(store)
        conn = await asyncpg.connect(self.dsn)
        try:
            table = f'"{self.schema}".outbox'
            await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            await conn.execute(f"ANALYZE {table}")
        finally:
            await conn.close()
        return store

    async def settle(self) -> None:
        """A checkpoint after queueing, so every drain starts with the same I/O behind it."""
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute("CHECKPOINT")
        finally:
            await conn.close()

    async def previous_claim_ms(self) -> float:
        """The replaced statement once, rolled back (so the backlog stays as it was)."""
        conn = await asyncpg.connect(self.dsn)
        try:
            sql = PREVIOUS_CLAIM.format(s=f'"{self.schema}".outbox')
            tx = conn.transaction()
            await tx.start()
            try:
                started = time.perf_counter()
                await conn.fetch(sql, "bench-previous", BATCH, 600.0)
                return (time.perf_counter() - started) * 1000
            finally:
                await tx.rollback()
        finally:
            await conn.close()

    async def done(self, store: PostgresDurability) -> None:
        await store.close()
        await drop_schema(self.dsn, self.schema)


class SQLite:
    name = "sqlite"

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="ik-bench-backlog-"))
        self.runs = 0

    async def healthy(self) -> SQLiteDurability:
        self.runs += 1
        store = await SQLiteDurability.open(self.directory / f"run{self.runs}.db")
        await queue(store, HISTORY, "history")
        await drain(store)
        return store

    async def settle(self) -> None:
        return None

    async def done(self, store: SQLiteDurability) -> None:
        await store.close()


async def measure(source: Any, backlog: int) -> dict[str, float]:
    """The first claim and the drain of ``backlog`` events queued on a healthy store."""
    store = await source.healthy()
    try:
        await queue(store, backlog, "backlog")
        claim = await first_claim_ms(store)
        await source.settle()
        drained = await drain(store)
        return {
            "first_claim_ms": claim,
            "events_per_second": backlog / drained["seconds"],
            "claim_ms": drained["claim_ms"],
            "mark_ms": drained["mark_ms"],
        }
    finally:
        await source.done(store)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=postgres_dsn())
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; median kept")
    parser.add_argument("--previous-max", type=int, default=8_000)
    args = parser.parse_args()
    sizes = [SMALL, args.backlog]
    results: list[dict[str, Any]] = []
    previous: list[dict[str, Any]] = []
    for source in (Postgres(args.dsn), SQLite()):
        rates: dict[int, float] = {}
        runs: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
        for _ in range(args.repeat):  # interleaved, so a noisy minute hits both sizes
            for backlog in sizes:
                runs[backlog].append(await measure(source, backlog))
        for backlog in sizes:
            rate = statistics.median(r["events_per_second"] for r in runs[backlog])
            rates[backlog] = rate
            results.append(
                {
                    "source": source.name,
                    "backlog": backlog,
                    "threads": THREADS,
                    "events_per_second": round(rate),
                    "events_per_second_runs": [
                        round(r["events_per_second"]) for r in runs[backlog]
                    ],
                    **{
                        key: round(statistics.median(r[key] for r in runs[backlog]), 2)
                        for key in ("first_claim_ms", "claim_ms", "mark_ms")
                    },
                }
            )
            print(
                f"{source.name:10} backlog {backlog:6}: {rate:7.0f} ev/s, claim"
                f" {results[-1]['claim_ms']:.1f} ms, mark {results[-1]['mark_ms']:.2f} ms",
                file=sys.stderr,
            )
        results.append(
            {
                "source": source.name,
                "ratio_large_to_small": round(rates[args.backlog] / rates[SMALL], 2),
            }
        )
        if isinstance(source, Postgres):
            for backlog in sorted({SMALL, 4_000, args.previous_max}):
                store = await source.healthy()
                try:
                    await queue(store, backlog, "backlog")
                    new = await first_claim_ms(store)
                    old = await source.previous_claim_ms()
                finally:
                    await source.done(store)
                previous.append(
                    {"backlog": backlog, "claim_ms": round(new, 2), "previous_claim_ms": round(old)}
                )
                print(
                    f"postgresql claim at {backlog:6}: {new:7.1f} ms, previous statement"
                    f" {old:9.0f} ms",
                    file=sys.stderr,
                )
    print()
    print(f"{'source':10} {'backlog':>7} {'ev/s':>7} {'claim ms':>9} {'mark ms':>8}")
    for r in results:
        if "backlog" in r:
            print(
                f"{r['source']:10} {r['backlog']:>7} {r['events_per_second']:>7}"
                f" {r['claim_ms']:>9.2f} {r['mark_ms']:>8.2f}"
            )
        else:
            print(f"{r['source']:10} ratio {args.backlog} / {SMALL}: {r['ratio_large_to_small']}")
    print(f"\n{'backlog':>7} {'claim ms':>9} {'previous claim ms':>18}")
    for p in previous:
        print(f"{p['backlog']:>7} {p['claim_ms']:>9} {p['previous_claim_ms']:>18}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "relay_backlog",
                "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": {
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                },
                "batch_size": BATCH,
                "threads": THREADS,
                "history": HISTORY,
                "statistics": "ANALYZE after the delivered history, autovacuum off on the outbox",
                "drain": results,
                "postgres_claim": previous,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    asyncio.run(main())
