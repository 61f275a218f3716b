"""PostgreSQL turn throughput, side by side with pgbench in one run (not a timed test).

    .venv/bin/python bench/postgres_turns.py [--dsn URL] [--seconds 8]

Prints a table of ratios and writes ``bench/results/postgres_turns.json``:
- the adapter's turns/s (no effect, one effect) at concurrency 1 and 8;
- pgbench running the adapter's own statements (captured from ``Statements``) - ratio >= 0.8;
- pgbench running the reference turns ``turn_1c.sql`` / ``turn_3c.sql`` - ratio >= 0.7;
- round trips, durable commits and WAL bytes per turn; replay round trips;
- per-turn cost at thread length 10 vs 10,000.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from intention_kernel.contracts import DurableTurnResult, KernelCheckpoint, TurnScope
from intention_kernel.contracts.events import KernelEvent
from intention_kernel.contracts.receipts import EffectAuthority, EffectIdentity
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.durability.postgres._sql import Statements

ROOT = Path(__file__).resolve().parent
REFERENCE = Path(os.environ.get("IK_BENCH_REFERENCE", "/work/shared/bench/reference"))
SCHEMA = "ik_bench"
REF_DB = "ik_bench_ref"
WORDS = [
    "agent",
    "turn",
    "payment",
    "refund",
    "ticket",
    "order",
    "review",
    "update",
    "schedule",
    "note",
]


def words(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n))


STATE = {f"k{i:03d}": words(10, i) for i in range(53)}  # ~4 KB, like the reference
RESPONSE = {"reply": words(300, 1), "tool_calls": [{"name": "send_email", "body": words(80, 2)}]}


def result_for(scope: TurnScope, effect_value: Any = None) -> DurableTurnResult:
    revision = 1 if scope.checkpoint is None else scope.checkpoint.revision + 1
    checkpoint = KernelCheckpoint(revision=revision, agent_fingerprint="bench", metadata=STATE)
    response = dict(RESPONSE, effect=effect_value)
    return DurableTurnResult(
        thread_id=scope.thread_id,
        turn_id=scope.turn_id,
        trace_id=f"trace-{scope.turn_id}",
        response=response,
        checkpoint=checkpoint,
    )


def events_for(scope: TurnScope) -> list[KernelEvent]:
    now = datetime.now(UTC)
    return [
        KernelEvent(
            id=f"evt-{scope.turn_id}-{i}",
            type=kind,
            occurred_at=now,
            thread_id=scope.thread_id,
            turn_id=scope.turn_id,
            sequence=i,
            correlation_id=f"trace-{scope.turn_id}",
            data={"body": words(25, i)},
        )
        for i, kind in enumerate(["turn.completed", "message.created", "effect.completed"])
    ]


async def provider(authority: EffectAuthority) -> Any:
    return {"provider_id": "msg_123", "status": 202}


def make_operation(effects: int) -> Callable[[TurnScope], Awaitable[None]]:
    async def operation(scope: TurnScope) -> None:
        if scope.prior_result is not None:
            return
        value = None
        for i in range(effects):
            key = f"send_email:{scope.turn_id}:{i}"
            value = (await scope.run_effect(EffectIdentity(key, "send_email"), provider)).value
        await scope.commit(result_for(scope, value), events_for(scope))

    return operation


# ---------------------------------------------------------------- adapter runs


def _client_process(dsn: str, effects: int, clients: range, seconds: float, out: Any) -> None:
    async def main() -> int:
        store = await PostgresDurability.open(dsn, schema=SCHEMA, max_size=len(clients) + 2)
        operation = make_operation(effects)
        deadline = time.monotonic() + seconds
        counts = [0] * len(clients)

        async def client(slot: int, c: int) -> None:
            n = 0
            while time.monotonic() < deadline:
                await store.with_turn(f"bench-{effects}-{c}", f"t{os.getpid()}-{n}", operation)
                n += 1
            counts[slot] = n

        await asyncio.gather(*(client(i, c) for i, c in enumerate(clients)))
        await store.close()
        return sum(counts)

    out.put(asyncio.run(main()))


def adapter_tps(dsn: str, effects: int, concurrency: int, seconds: float) -> float:
    """Turns/s with ``concurrency`` clients (each on its own thread) over two processes."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = min(concurrency, 2)
    per = [range(p, concurrency, procs) for p in range(procs)]
    processes = [
        ctx.Process(target=_client_process, args=(dsn, effects, per[p], seconds, queue))
        for p in range(procs)
    ]
    for p in processes:
        p.start()
    total = sum(queue.get() for _ in processes)
    for p in processes:
        p.join()
    return total / seconds


class CountingPool:
    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.count = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.pool, name)
        if name not in ("fetchrow", "fetch", "execute", "fetchval"):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await attr(*args, **kwargs)

        return call


async def per_turn_figures(dsn: str) -> dict[str, Any]:
    """Round trips, durable commits and WAL bytes per turn; replay; thread-length cost."""
    store = await PostgresDurability.open(dsn, schema=SCHEMA, max_size=2)
    counting = CountingPool(store._pool)
    store._pool = counting
    conn = await asyncpg.connect(dsn)
    figures: dict[str, Any] = {}
    for effects in (0, 1):
        op = make_operation(effects)
        n = 200
        await store.with_turn("fig", f"warm-{effects}", op)
        counting.count = 0
        lsn0 = await conn.fetchval("SELECT pg_current_wal_lsn()")
        for i in range(n):
            await store.with_turn(f"fig-{effects}", f"turn-{i}", op)
        wal = await conn.fetchval("SELECT pg_current_wal_lsn() - $1::pg_lsn", lsn0)
        figures[f"effects_{effects}"] = {
            "round_trips_per_turn": counting.count / n,
            "durable_commits_per_turn": 1 + 2 * effects,  # prepared, completed, commit
            "wal_bytes_per_turn": round(float(wal) / n),
        }
    counting.count = 0
    await store.with_turn("fig-0", "turn-0", make_operation(0))
    figures["replay_round_trips"] = counting.count
    figures["replay_takes_lease"] = False
    figures["thread_length"] = await thread_length_cost(store, conn)
    await conn.close()
    await store.close()
    return figures


async def thread_length_cost(store: PostgresDurability, conn: Any) -> dict[str, float]:
    """Seconds per turn on a thread with 10 committed turns vs one with 10,000."""
    op = make_operation(0)
    for i in range(10):
        await store.with_turn("short", f"seed-{i}", op)
    # Grow the long thread with the same rows a turn writes, in bulk.
    await store.with_turn("long", "seed-0", op)
    s = f'"{SCHEMA}"'
    await conn.execute(
        f"INSERT INTO {s}.turns (thread_id, turn_id, revision, fingerprint, result)"
        f" SELECT 'long', 'bulk-' || g, g, NULL, t.result"
        f" FROM generate_series(2, 10000) g, {s}.turns t"
        f" WHERE t.thread_id = 'long' AND t.turn_id = 'seed-0'"
    )
    last = await conn.fetchval(
        f"SELECT result FROM {s}.turns WHERE thread_id = 'long' AND turn_id = 'seed-0'"
    )
    fixed = json.loads(last)
    fixed["turn_id"] = "bulk-10000"
    fixed["checkpoint"]["revision"] = 10000
    await conn.execute(
        f"UPDATE {s}.turns SET result = $1 WHERE thread_id = 'long' AND revision = 10000",
        json.dumps(fixed),
    )
    await conn.execute(
        f"UPDATE {s}.heads SET revision = 10000, turn_id = 'bulk-10000' WHERE thread_id = 'long'"
    )
    await conn.execute(f"ANALYZE {s}.turns")
    timings: dict[str, float] = {}
    for thread in ("short", "long", "short", "long"):
        started = time.perf_counter()
        for i in range(150):
            await store.with_turn(thread, f"m-{time.monotonic_ns()}-{i}", op)
        timings[thread] = min(timings.get(thread, 1e9), (time.perf_counter() - started) / 150)
    return {
        "seconds_per_turn_at_10": timings["short"],
        "seconds_per_turn_at_10000": timings["long"],
        "ratio": timings["long"] / timings["short"],
    }


# ---------------------------------------------------------------- pgbench


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def ours_script(effects: int) -> str:
    """The adapter's own statements for one turn, as a pgbench script."""
    sql = Statements.render(SCHEMA)
    # Parameters become pgbench variables or literals; NULLs become 0 for \gset.
    acquire = sql.acquire.replace("SELECT a.epoch,", "SELECT coalesce(a.epoch, 0) AS epoch,")
    acquire = acquire.replace(
        "h.revision AS head_revision", "coalesce(h.revision, 0) AS head_revision"
    )
    result = _literal(json.dumps({"thread_id": "x", "response": RESPONSE, "state": STATE}))
    event = _literal(json.dumps({"type": "turn.completed", "data": {"body": words(25, 0)}}))
    thread = "'pgb-' || :client_id"
    owner = "'pgb-' || :client_id || '-' || :r"
    turn = "'t-' || :r"

    def bind(statement: str, values: dict[int, str]) -> str:
        out = statement
        for n in sorted(values, reverse=True):
            out = out.replace(f"${n}", values[n])
        return " ".join(out.split()) + ";"

    lease = {1: thread, 2: ":epoch", 3: owner}
    lines = [
        r"\set r random(1, 2000000000)",
        bind(acquire, {1: thread, 2: turn, 3: owner, 4: "10", 5: "true"})
        + "\n\\gset".replace(";\n", "\n"),
    ]
    lines[-1] = lines[-1].replace(";\n\\gset", "\n\\gset")
    receipt = _literal(json.dumps({"status": "prepared", "key": "k", "pad": words(20, 3)}))
    for _ in range(effects):
        key = "'send_email:' || :r"
        lines.append(bind(sql.read_receipt, {**lease, 4: key}))
        for status, expected in (("prepared", "NULL"), ("completed", "'prepared'")):
            lines.append(
                bind(
                    sql.write_receipt,
                    {
                        **lease,
                        4: key,
                        5: "'rcpt-' || :r",
                        6: _literal(status),
                        7: "now()",
                        8: receipt,
                        9: expected,
                    },
                )
            )
    lines.append(
        bind(
            sql.commit,
            {
                **lease,
                4: turn,
                5: ":head_revision + 1",
                6: ":head_revision",
                7: "NULL",
                8: result,
                9: "'{0,1,2}'",
                10: f"ARRAY[{event}, {event}, {event}]",
            },
        )
    )
    lines.append(bind(sql.release, lease))
    return "\n".join(lines) + "\n"


def pgbench(dbname_dsn: str, script: str, clients: int, seconds: float) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    out = subprocess.run(
        [
            "pgbench",
            "-n",
            "-M",
            "prepared",
            "-c",
            str(clients),
            "-j",
            str(min(clients, 2)),
            "-T",
            str(int(seconds)),
            "-f",
            f.name,
            dbname_dsn,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out.stdout)
    if not match:
        raise RuntimeError(f"pgbench failed: {out.stdout[-500:]} {out.stderr[-1500:]}")
    return float(match.group(1))


def with_db(dsn: str, db: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{db}"))


async def setup_reference(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", REF_DB):
        await conn.execute(f"CREATE DATABASE {REF_DB}")
    await conn.close()
    ref = with_db(dsn, REF_DB)
    conn = await asyncpg.connect(ref)
    await conn.execute((REFERENCE / "schema.sql").read_text())
    state = json.dumps({"version": 1, "facts": STATE})
    for i in range(1, 17):
        await conn.execute("INSERT INTO threads (thread_id) VALUES ($1)", i)
        await conn.execute("INSERT INTO checkpoints VALUES ($1, 0, $2::jsonb)", i, state)
        await conn.execute("INSERT INTO counters (id) VALUES ($1)", i)
    await conn.close()
    return ref


async def reset_schema(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    await conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
    await conn.close()
    store = await PostgresDurability.open(dsn, schema=SCHEMA, setup=True)
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn", default=os.environ.get("IK_POSTGRES_DSN", "postgresql://postgres@127.0.0.1/test")
    )
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell; medians reported")
    parser.add_argument("--out", default=str(ROOT / "results" / "postgres_turns.json"))
    args = parser.parse_args()
    asyncio.run(reset_schema(args.dsn))
    ref = asyncio.run(setup_reference(args.dsn))
    rows: list[dict[str, Any]] = []
    for effects, reference in ((0, "turn_1c.sql"), (1, "turn_3c.sql")):
        for clients in (1, 8):
            runs: list[tuple[float, float, float]] = []
            for _ in range(args.repeat):  # interleaved, so load changes hit all three alike
                runs.append(
                    (
                        adapter_tps(args.dsn, effects, clients, args.seconds),
                        pgbench(args.dsn, ours_script(effects), clients, args.seconds),
                        pgbench(ref, (REFERENCE / reference).read_text(), clients, args.seconds),
                    )
                )
            ours, same_sql, ref_tps = (statistics.median(r[i] for r in runs) for i in range(3))
            rows.append(
                {
                    "turn": "one effect" if effects else "no effect",
                    "clients": clients,
                    "adapter_tps": round(ours, 1),
                    "pgbench_same_sql_tps": round(same_sql, 1),
                    "reference": reference,
                    "reference_tps": round(ref_tps, 1),
                    "ratio_vs_same_sql": round(ours / same_sql, 3),
                    "ratio_vs_reference": round(ours / ref_tps, 3),
                    "runs": [[round(x, 1) for x in r] for r in runs],
                }
            )
            print(rows[-1], flush=True)
    figures = asyncio.run(per_turn_figures(args.dsn))
    print()
    header = f"{'turn':<11} {'c':>2} {'adapter/s':>10} {'pgb same':>9} {'ratio':>6}"
    print(header + f" {'reference':>12} {'ref/s':>8} {'ratio':>6}")
    for r in rows:
        print(
            f"{r['turn']:<11} {r['clients']:>2} {r['adapter_tps']:>10.1f}"
            f" {r['pgbench_same_sql_tps']:>9.1f} {r['ratio_vs_same_sql']:>6.2f}"
            f" {r['reference']:>12} {r['reference_tps']:>8.1f} {r['ratio_vs_reference']:>6.2f}"
        )
    print(json.dumps(figures, indent=2))
    report = {
        "measured_at": datetime.now(UTC).isoformat(),
        "seconds_per_run": args.seconds,
        "repeat": args.repeat,
        "cpu_count": os.cpu_count(),
        "throughput": rows,
        "per_turn": figures,
        "goals": {"ratio_vs_same_sql_c8": 0.8, "ratio_vs_reference_c8": 0.7},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    asyncio.run(_drop(args.dsn))


async def _drop(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    await conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
    await conn.close()


if __name__ == "__main__":
    main()
