"""Thread listing with filters on a large store: time per query, SQLite and PostgreSQL.

    .venv/bin/python bench/inspector_threads.py [--threads 100000] [--reps 5]
        [--dsn postgresql://postgres@127.0.0.1:5432/test] [--no-postgres]

Seeds the threads straight into the tables (bulk SQL, not one turn each): every thread has a
head turn with a realistic checkpoint (a few messages, ~1.5 KB); 1% wait on a pending
interaction, 1% have an uncertain receipt, 0.5% have only a receipt (no head), 0.1% have a
corrupt head, 10% an old agent fingerprint. Then times ``list_threads`` through the public
API (median of ``--reps``): the first page, a deep page (``after`` near the end), a prefix and
each filter. Writes ``bench/results/inspector_threads.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from intention_kernel.contracts.checkpoint import Interaction, KernelCheckpoint, Message
from intention_kernel.contracts.turns import DurableTurnResult

RESULTS = Path(__file__).parent / "results" / "inspector_threads.json"
CURRENT, OLD = "agent@current", "agent@old"
_MARK = "@@THREAD@@"
_CORRUPT = '{"thread_id": "x", "checkpoint": {"rev'
_RECEIPT = '{"status": "uncertain"}'

QUERIES: dict[str, dict[str, Any]] = {
    "first_page": {},
    "deep_page": {"after": "DEEP"},
    "prefix": {"prefix": "t00420"},
    "uncertain": {"uncertain": True},
    "not_uncertain": {"uncertain": False},
    "pending": {"pending": True},
    "not_pending": {"pending": False},
    "corrupt": {"corrupt": True},
    "not_corrupt": {"corrupt": False},
    "incompatible": {"fingerprint_not_in": [CURRENT]},
    "pending_and_incompatible": {"pending": True, "fingerprint_not_in": [CURRENT]},
    "deep_pending": {"after": "DEEP", "pending": True},
}
"""Named ``list_threads`` arguments; ``DEEP`` stands for an id 100 threads from the end."""


def thread_id(n: int) -> str:
    return f"t{n:07d}"


def _document(pending: bool, fingerprint: str) -> str:
    """A head turn result with ``_MARK`` in place of the thread id."""
    checkpoint = KernelCheckpoint(
        revision=1,
        agent_fingerprint=fingerprint,
        messages=[
            Message(role=role, text=f"message {i} " + "lorem ipsum " * 20, turn_id="turn-1")
            for i, role in enumerate(("user", "assistant", "user", "assistant"))
        ],
        interaction=Interaction(id="ix-1", kind="confirmation", prompt="Refund?", turn_id="turn-1")
        if pending
        else None,
    )
    return DurableTurnResult(
        thread_id=_MARK, turn_id="turn-1", trace_id="trace-1", response={}, checkpoint=checkpoint
    ).model_dump_json()


def plan(count: int) -> list[dict[str, Any]]:
    """What each thread holds, the same for both stores."""
    threads = []
    for n in range(count):
        threads.append(
            {
                "id": thread_id(n),
                "head": n % 200 != 7,
                "pending": n % 100 == 3,
                "uncertain": n % 100 == 5 or n % 200 == 7,
                "corrupt": n % 1000 == 11,
                "fingerprint": OLD if n % 10 == 9 else CURRENT,
            }
        )
    return threads


def _rows(threads: list[dict[str, Any]]) -> tuple[list[Any], list[Any], list[Any]]:
    docs = {(p, f): _document(p, f) for p in (False, True) for f in (CURRENT, OLD)}
    turns, heads, receipts = [], [], []
    for t in threads:
        if t["head"]:
            text = (
                _CORRUPT
                if t["corrupt"]
                else docs[(t["pending"], t["fingerprint"])].replace(_MARK, t["id"])
            )
            turns.append((t["id"], text))
            kind = "confirmation" if t["pending"] else None
            heads.append((t["id"], t["fingerprint"], kind))
        if t["uncertain"]:
            receipts.append((t["id"],))
    return turns, heads, receipts


def seed_sqlite(path: Path, threads: list[dict[str, Any]]) -> None:
    """Bulk rows into a migrated SQLite store (``SQLiteDurability.open`` made the schema)."""
    turns, heads, receipts = _rows(threads)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO ik_turns (thread_id, turn_id, revision, fingerprint, result,"
            " committed_at) VALUES (?, 'turn-1', 1, NULL, ?, '2026-01-01T00:00:00+00:00')",
            turns,
        )
        conn.executemany(
            "INSERT INTO ik_heads (thread_id, revision, turn_id, agent_fingerprint,"
            " pending_interaction) VALUES (?, 1, 'turn-1', ?, ?)",
            heads,
        )
        conn.executemany(
            "INSERT INTO ik_receipts (thread_id, idempotency_key, receipt_id, capability_id,"
            " status, updated_us, document) VALUES (?, 'payments.charge:k1', 'rcpt-1',"
            f" 'payments.charge', 'uncertain', 0, '{_RECEIPT}')",
            receipts,
        )
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()


async def seed_postgres(conn: Any, schema: str, threads: list[dict[str, Any]]) -> None:
    """Bulk rows into a migrated PostgreSQL schema (``COPY``)."""
    turns, heads, receipts = _rows(threads)
    s = f'"{schema}"'
    await conn.copy_records_to_table(
        "turns",
        schema_name=schema,
        columns=["thread_id", "turn_id", "revision", "result"],
        records=[(t, "turn-1", 1, text) for t, text in turns],
    )
    await conn.copy_records_to_table(
        "heads",
        schema_name=schema,
        columns=["thread_id", "revision", "turn_id", "agent_fingerprint", "pending_interaction"],
        records=[(t, 1, "turn-1", f, k) for t, f, k in heads],
    )
    await conn.execute(
        f"INSERT INTO {s}.receipts (thread_id, idempotency_key, id, status, updated_at, receipt)"
        " SELECT t, 'payments.charge:k1', 'rcpt-1', 'uncertain', now(), $2"
        " FROM unnest($1::text[]) AS t",
        [r[0] for r in receipts],
        _RECEIPT,
    )
    await conn.execute(f"ANALYZE {s}.turns; ANALYZE {s}.heads; ANALYZE {s}.receipts")


async def _time(call: Callable[[], Awaitable[list[Any]]], reps: int) -> dict[str, float | int]:
    await call()  # warm
    times, found = [], 0
    for _ in range(reps):
        started = time.perf_counter()
        found = len(await call())
        times.append((time.perf_counter() - started) * 1000)
    return {
        "median_ms": round(statistics.median(times), 2),
        "max_ms": round(max(times), 2),
        "rows": found,
    }


async def measure(store: Any, count: int, reps: int) -> dict[str, Any]:
    deep = thread_id(count - 100)
    out = {}
    for name, kwargs in QUERIES.items():
        args = {k: (deep if v == "DEEP" else v) for k, v in kwargs.items()}
        out[name] = await _time(functools.partial(store.list_threads, limit=100, **args), reps)
        print(f"  {name:26} {out[name]}", flush=True)
    return out


async def run_sqlite(threads: list[dict[str, Any]], reps: int) -> dict[str, Any]:
    from intention_kernel.durability.sqlite import SQLiteDurability

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "threads.db"
        await (await SQLiteDurability.open(path)).close()
        started = time.perf_counter()
        seed_sqlite(path, threads)
        print(f"sqlite: seeded in {time.perf_counter() - started:.1f}s", flush=True)
        store = await SQLiteDurability.open(path)
        try:
            return await measure(store, len(threads), reps)
        finally:
            await store.close()


async def run_postgres(dsn: str, threads: list[dict[str, Any]], reps: int) -> dict[str, Any]:
    from intention_kernel.durability.postgres import (
        PostgresDurability,
        admin_connection,
        drop_schema,
    )

    schema = "ik_bench_inspector"
    await drop_schema(dsn, schema)
    await (await PostgresDurability.open(dsn, schema=schema, setup=True)).close()
    try:
        started = time.perf_counter()
        async with admin_connection(dsn) as conn:
            await seed_postgres(conn, schema, threads)
        print(f"postgresql: seeded in {time.perf_counter() - started:.1f}s", flush=True)
        store = await PostgresDurability.open(dsn, schema=schema, max_size=2)
        try:
            return await measure(store, len(threads), reps)
        finally:
            await store.close()
    finally:
        await drop_schema(dsn, schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    threads = plan(args.threads)
    results: dict[str, Any] = {
        "threads": args.threads,
        "page_size": 100,
        "reps": args.reps,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "queries": {name: dict(q) for name, q in QUERIES.items()},
        "results": {},
    }
    results["results"]["sqlite"] = asyncio.run(run_sqlite(threads, args.reps))
    if not args.no_postgres:
        results["results"]["postgresql"] = asyncio.run(run_postgres(args.dsn, threads, args.reps))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
