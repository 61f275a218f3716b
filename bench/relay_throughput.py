"""Outbox relay throughput and commit-to-delivery lag per sink, with 1 and 3 relays.

    .venv/bin/python bench/relay_throughput.py [--events 5000] [--webhook-events 2000]

Needs the local NATS (4222) and Redis (6379) servers (``scripts/services``). Source: the memory
store, so every relay runs in this one process and event loop (3 relays overlap their I/O
waits, not CPU work). Two phases per (sink, relays):

* throughput: a backlog of N committed events (5 per turn, 50 threads) drained from start to
  empty, in events per second (median of ``--repeat`` runs, default 3);
* lag: a paced producer commits one 5-event turn every 5 ms while the relays run
  (``poll_interval`` 10 ms); lag = sink acknowledgement time - commit return time, p50/p99.

Prints a table and writes ``bench/results/relay_throughput.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from _relay_common import Timed, commit_turn

from intention_kernel.relay import OutboxRelay, open_sink
from intention_kernel.relay.signing import new_secret
from intention_kernel.testing import MemoryDurability

RESULTS = Path(__file__).parent / "results" / "relay_throughput.json"
SECRET = new_secret()
THREADS = 50
PER_TURN = 5


async def until_drained(store: MemoryDurability) -> None:
    for _ in range(200_000):
        if not (await store.outbox_stats()).pending:
            return
        await asyncio.sleep(0.005)
    raise RuntimeError("the outbox did not drain")


async def drain(store: MemoryDurability, relays: list[OutboxRelay]) -> None:
    tasks = [asyncio.create_task(r.run()) for r in relays]
    await until_drained(store)
    for relay in relays:
        relay.stop()
    await asyncio.gather(*tasks)


async def throughput(url: str, relays: int, events: int) -> float:
    store = MemoryDurability()
    for turn in range(events // (THREADS * PER_TURN)):
        for thread in range(THREADS):
            await commit_turn(store, f"t{thread}", f"turn-{turn:05d}", PER_TURN)
    total = (await store.outbox_stats()).pending
    sink = open_sink(url)
    try:
        group = [
            OutboxRelay(store, sink, batch_size=200, poll_interval=0.01) for _ in range(relays)
        ]
        started = time.perf_counter()
        await drain(store, group)
        elapsed = time.perf_counter() - started
    finally:
        await sink.close()
    return total / elapsed


async def lag(url: str, relays: int, turns: int) -> tuple[float, float]:
    store = MemoryDurability()
    sink = Timed(open_sink(url))
    group = [OutboxRelay(store, sink, batch_size=200, poll_interval=0.01) for _ in range(relays)]
    tasks = [asyncio.create_task(r.run()) for r in group]
    committed: dict[str, float] = {}
    try:
        for turn in range(turns):
            ids = await commit_turn(store, f"t{turn % THREADS}", f"turn-{turn:05d}", PER_TURN)
            now = time.perf_counter()
            committed.update(dict.fromkeys(ids, now))
            await asyncio.sleep(0.005)
        await until_drained(store)
    finally:
        for relay in group:
            relay.stop()
        await asyncio.gather(*tasks)
        await sink.close()
    lags = sorted((sink.acked[i] - t) * 1000 for i, t in committed.items())
    return statistics.median(lags), lags[min(len(lags) - 1, int(len(lags) * 0.99))]


def _serve_webhook(port: int) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return None

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--webhook-events", type=int, default=2000)
    parser.add_argument("--lag-turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs; median kept")
    args = parser.parse_args()

    os.environ["IK_BENCH_SECRET"] = SECRET
    port = _free_port()
    server = multiprocessing.Process(target=_serve_webhook, args=(port,), daemon=True)
    server.start()
    token = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix="ik-relay-bench-"))
    sinks: dict[str, Callable[[], str]] = {
        "file": lambda: (tmp / f"{uuid.uuid4().hex}.jsonl").as_uri(),
        "webhook": lambda: f"webhook+http://127.0.0.1:{port}/hook?secret_env=IK_BENCH_SECRET",
        "nats": lambda: f"nats://127.0.0.1:4222/ik.bench.{token}?stream=IK_BENCH_{token}",
        "redis": lambda: f"redis://127.0.0.1:6379/0?stream=ik:bench:{token}",
    }
    await asyncio.sleep(0.3)  # let the receiver bind
    rows = []
    try:
        for name, make_url in sinks.items():
            events = args.webhook_events if name == "webhook" else args.events
            for relays in (1, 3):
                rates = [await throughput(make_url(), relays, events) for _ in range(args.repeat)]
                rate = statistics.median(rates)
                p50, p99 = await lag(make_url(), relays, args.lag_turns)
                rows.append(
                    {
                        "sink": name,
                        "relays": relays,
                        "events": events,
                        "events_per_second": round(rate),
                        "events_per_second_runs": [round(r) for r in rates],
                        "lag_p50_ms": round(p50, 2),
                        "lag_p99_ms": round(p99, 2),
                    }
                )
                print(
                    f"{name:8} relays={relays}  {rate:8.0f} ev/s  "
                    f"lag p50 {p50:7.2f} ms  p99 {p99:7.2f} ms",
                    file=sys.stderr,
                )
    finally:
        server.terminate()
        await _cleanup(token)
    print()
    print(f"{'sink':8} {'relays':>6} {'events':>7} {'ev/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for row in rows:
        print(
            f"{row['sink']:8} {row['relays']:>6} {row['events']:>7} "
            f"{row['events_per_second']:>8} {row['lag_p50_ms']:>8} {row['lag_p99_ms']:>8}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "relay_throughput",
                "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": {
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                },
                "source": "memory",
                "batch_size": 200,
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {RESULTS}")


async def _cleanup(token: str) -> None:
    import nats
    import redis.asyncio as aioredis

    nc = await nats.connect("nats://127.0.0.1:4222")
    try:
        await nc.jetstream().delete_stream(f"IK_BENCH_{token}")
    except nats.js.errors.NotFoundError:
        pass  # the run stopped before its NATS side
    finally:
        await nc.close()
    client = aioredis.Redis(host="127.0.0.1", port=6379)
    await client.delete(f"ik:bench:{token}")
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
