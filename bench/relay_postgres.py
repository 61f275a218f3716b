"""Outbox relay from a PostgreSQL store: throughput, commit-to-delivery lag, NOTIFY cost.

    .venv/bin/python bench/relay_postgres.py [--dsn URL] [--events 5000] [--repeat 3]

Needs PostgreSQL (``IK_POSTGRES_DSN``) and, for the NATS sink, the local NATS server on 4222
(``scripts/services``). Every relay has its own pool (as separate relay processes would) and all
run in this one process and event loop, in a scratch schema dropped at the end.

* commit cost: turns/s of 5-event turns from 1 and 4 concurrent writers, with the NOTIFY
  trigger off and on (median of ``--repeat``);
* throughput: a backlog of N committed events (5 per turn, 50 threads) drained from start to
  empty, with 1 and 3 relays, to a file sink and to NATS JetStream (median of ``--repeat``);
* lag: a paced producer commits one 5-event turn every 5 ms while the relays run; lag = sink
  acknowledgement time - commit return time, p50/p99. Polling every 10 ms, and LISTEN/NOTIFY
  with a 1 s poll interval (the wake-up does the work).

Prints a table and writes ``bench/results/relay_postgres.json``.
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
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _relay_common import Timed, commit_turn, postgres_dsn, scratch_schema

from intention_kernel.durability.postgres import PostgresDurability, drop_schema
from intention_kernel.relay import OutboxRelay, open_sink

RESULTS = Path(__file__).parent / "results" / "relay_postgres.json"
THREADS = 50
PER_TURN = 5
BATCH = 200


class Bench:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.schema = ""
        self.run = 0

    async def fresh(self) -> PostgresDurability:
        """A new scratch schema (dropping the previous one) and a writer store on it."""
        if self.schema:
            await drop_schema(self.dsn, self.schema)
        self.schema = scratch_schema("ik_bench_relay")
        return await self.open(setup=True, max_size=8)

    async def open(
        self, *, setup: bool = False, max_size: int = 4, **kw: Any
    ) -> PostgresDurability:
        return await PostgresDurability.open(
            self.dsn, schema=self.schema, setup=setup, min_size=1, max_size=max_size, **kw
        )

    async def close(self) -> None:
        if self.schema:
            await drop_schema(self.dsn, self.schema)

    async def backlog(self, store: PostgresDurability, events: int, writers: int = 4) -> None:
        turns = events // (THREADS * PER_TURN)

        async def write(part: int) -> None:
            for turn in range(turns):
                for thread in range(part, THREADS, writers):
                    await commit_turn(store, f"t{thread}", f"turn-{turn:05d}", PER_TURN)

        await asyncio.gather(*(write(p) for p in range(writers)))

    async def commit_rate(self, notify: bool, writers: int, turns: int) -> float:
        store = await self.fresh()
        try:
            await store.set_outbox_notify(notify)
            per = turns // writers

            async def write(part: int) -> None:
                for n in range(per):
                    await commit_turn(store, f"w{part}-{n % 20}", f"turn-{n:05d}", PER_TURN)

            started = time.perf_counter()
            await asyncio.gather(*(write(p) for p in range(writers)))
            return per * writers / (time.perf_counter() - started)
        finally:
            await store.close()

    async def throughput(self, url: str, relays: int, events: int) -> float:
        store = await self.fresh()
        sources: list[PostgresDurability] = []
        sink = open_sink(url)
        try:
            await self.backlog(store, events)
            total = (await store.outbox_stats()).pending
            sources = [await self.open() for _ in range(relays)]
            group = [OutboxRelay(s, sink, batch_size=BATCH, poll_interval=0.01) for s in sources]
            started = time.perf_counter()
            tasks = [asyncio.create_task(r.run()) for r in group]
            while (await store.outbox_stats()).pending:  # noqa: ASYNC110 - polls the store
                await asyncio.sleep(0.005)
            elapsed = time.perf_counter() - started
            for relay in group:
                relay.stop()
            await asyncio.gather(*tasks)
            return total / elapsed
        finally:
            await sink.close()
            for source in sources:
                await source.close()
            await store.close()

    async def lag(self, url: str, relays: int, turns: int, listen: bool) -> tuple[float, float]:
        store = await self.fresh()
        await store.set_outbox_notify(listen)
        sink = Timed(open_sink(url))
        sources = [await self.open(listen=listen) for _ in range(relays)]
        poll = 1.0 if listen else 0.01
        group = [OutboxRelay(s, sink, batch_size=BATCH, poll_interval=poll) for s in sources]
        tasks = [asyncio.create_task(r.run()) for r in group]
        committed: dict[str, float] = {}
        try:
            for turn in range(turns):
                ids = await commit_turn(store, f"t{turn % THREADS}", f"turn-{turn:05d}", PER_TURN)
                committed.update(dict.fromkeys(ids, time.perf_counter()))
                await asyncio.sleep(0.005)
            while (await store.outbox_stats()).pending:  # noqa: ASYNC110 - polls the store
                await asyncio.sleep(0.005)
        finally:
            for relay in group:
                relay.stop()
            await asyncio.gather(*tasks)
            await sink.close()
            for source in sources:
                await source.close()
            await store.close()
        lags = sorted((sink.acked[i] - t) * 1000 for i, t in committed.items())
        return statistics.median(lags), lags[min(len(lags) - 1, int(len(lags) * 0.99))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=postgres_dsn())
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--commit-turns", type=int, default=800)
    parser.add_argument("--lag-turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; median kept")
    parser.add_argument("--sinks", default="file,nats")
    args = parser.parse_args()

    bench = Bench(args.dsn)
    token = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix="ik-relay-pg-bench-"))
    make: dict[str, Callable[[], str]] = {
        "file": lambda: (tmp / f"{uuid.uuid4().hex}.jsonl").as_uri(),
        "nats": lambda: f"nats://127.0.0.1:4222/ik.pgbench.{token}?stream=IK_PGBENCH_{token}",
    }
    commits: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    try:
        for writers in (1, 4):
            for notify in (False, True):
                rates = [
                    await bench.commit_rate(notify, writers, args.commit_turns)
                    for _ in range(args.repeat)
                ]
                commits.append(
                    {
                        "writers": writers,
                        "notify_trigger": notify,
                        "turns_per_second": round(statistics.median(rates)),
                        "runs": [round(r) for r in rates],
                    }
                )
                print(
                    f"commit writers={writers} notify={notify!s:5} "
                    f"{statistics.median(rates):7.0f} turns/s",
                    file=sys.stderr,
                )
        for name in args.sinks.split(","):
            for relays in (1, 3):
                rates = [
                    await bench.throughput(make[name](), relays, args.events)
                    for _ in range(args.repeat)
                ]
                rate = statistics.median(rates)
                p50, p99 = await bench.lag(make[name](), relays, args.lag_turns, listen=False)
                l50, l99 = await bench.lag(make[name](), relays, args.lag_turns, listen=True)
                rows.append(
                    {
                        "sink": name,
                        "relays": relays,
                        "events": args.events,
                        "events_per_second": round(rate),
                        "events_per_second_runs": [round(r) for r in rates],
                        "lag_p50_ms": round(p50, 2),
                        "lag_p99_ms": round(p99, 2),
                        "listen_lag_p50_ms": round(l50, 2),
                        "listen_lag_p99_ms": round(l99, 2),
                    }
                )
                print(
                    f"{name:5} relays={relays} {rate:7.0f} ev/s  poll lag p50 {p50:6.2f} "
                    f"p99 {p99:6.2f} ms  listen lag p50 {l50:6.2f} p99 {l99:6.2f} ms",
                    file=sys.stderr,
                )
    finally:
        await bench.close()
        if "nats" in args.sinks:
            await _cleanup(token)
    print()
    print(f"{'writers':>7} {'notify':>6} {'turns/s':>8}")
    for c in commits:
        print(f"{c['writers']:>7} {c['notify_trigger']!s:>6} {c['turns_per_second']:>8}")
    print()
    print(
        f"{'sink':5} {'relays':>6} {'ev/s':>7} {'p50 ms':>7} {'p99 ms':>7}"
        f" {'listen p50':>10} {'listen p99':>10}"
    )
    for r in rows:
        print(
            f"{r['sink']:5} {r['relays']:>6} {r['events_per_second']:>7} {r['lag_p50_ms']:>7}"
            f" {r['lag_p99_ms']:>7} {r['listen_lag_p50_ms']:>10} {r['listen_lag_p99_ms']:>10}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "relay_postgres",
                "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": {
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                },
                "source": "postgresql",
                "batch_size": BATCH,
                "per_turn": PER_TURN,
                "commit": commits,
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {RESULTS}")


async def _cleanup(token: str) -> None:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    try:
        await nc.jetstream().delete_stream(f"IK_PGBENCH_{token}")
    except Exception:
        pass
    finally:
        await nc.close()


if __name__ == "__main__":
    asyncio.run(main())
