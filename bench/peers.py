"""Peers on the same PostgreSQL, in the same run as ours: DBOS and LangGraph (not a timed test).

    .venv/bin/python bench/peers.py [--seconds 10] [--reps 3] [--clients 8]

Peers come with the bench extra: ``pip install -e '.[bench]'``. Each repetition runs, each in a
fresh process with one asyncio task per client on its own thread/workflow ids, for
``--seconds``:

- ours, no effect: ``with_turn`` + ``commit`` on the PostgreSQL store;
- LangGraph: a one-node graph compiled with ``AsyncPostgresSaver`` (its PostgreSQL checkpointer,
  on the same server, database ``ik_bench_langgraph``), one ``ainvoke`` per turn on the
  client's thread; the node returns the same ~2 KB reply and ~4 KB state;
- ours, one effect: ``run_effect`` + ``commit``;
- DBOS: a workflow calling one step (the same provider answer), workflow id = the turn, with
  the same state as input and the same reply as output; its system database is
  ``ik_bench_dbos`` on the same server.

Each cell warms up (one turn per client), says ``ready`` and waits for ``go``; around the timed
window the server is read as in ``postgres_turns`` (``_server.Probe``, for the cell's database):
transactions (``pg_stat_database.xact_commit``), WAL records, bytes and full-page images of that
database (``pg_walinspect``), WAL fsyncs (``pg_stat_wal``, whole cluster), statements
(``pg_stat_statements`` when preloaded; else counted on the client for ours, not measured for
the peers), server CPU (``/proc`` of the database's backends and the WAL processes) and the
client CPU of the cell's process (``getrusage``), all per turn, with the load before and after
every cell (a warning is printed when the 1-minute load before a cell exceeds the cores).

Ratios ours/peer are taken within each repetition (no effect vs LangGraph, one effect vs DBOS)
and the medians reported. Writes ``bench/results/peers.json``. A peer that cannot be imported
or started is reported with the reason instead of a figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _capture import Recorder
from _measure import (
    OTHERS_LIMIT,
    cell_machine,
    cpu_us_per_turn,
    load_warning,
    machine,
    machine_cpu,
    others_share,
    others_warning,
    per_turn,
    ratio,
    self_cpu,
    table_cell,
)
from _payloads import EFFECT_RESPONSE, REPLY, STATE, operation
from _server import Probe

RESULTS = Path(__file__).resolve().parent / "results" / "peers.json"
DEFAULT_DSN = os.environ.get("IK_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
DATABASES = {"ours": "ik_bench", "langgraph": "ik_bench_langgraph", "dbos": "ik_bench_dbos"}
PAIRS = (("ours_no_effect", "langgraph"), ("ours_one_effect", "dbos"))
CELL_DATABASE = {
    "ours_no_effect": DATABASES["ours"],
    "ours_one_effect": DATABASES["ours"],
    "langgraph": DATABASES["langgraph"],
    "dbos": DATABASES["dbos"],
}


def with_db(dsn: str, db: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{db}"))


def cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


Turn = Callable[[int, int], Awaitable[None]]


COUNTER = Recorder(keep=False)
"""Counts the asyncpg statements of the timed window (ours; the peers use psycopg)."""


async def drive(turn: Turn, clients: int, seconds: float) -> dict[str, Any]:
    """Warm each client up with one turn, say ``ready``, wait for ``go``, then run turns until
    the deadline."""
    await asyncio.gather(*(turn(c, 0) for c in range(clients)))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    counts = [0] * clients
    started, cpu = time.monotonic(), cpu_now()
    COUNTER.active = True
    deadline = started + seconds

    async def client(c: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            await turn(c, n)
            counts[c] = n

    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed, used = time.monotonic() - started, cpu_now() - cpu
    COUNTER.active = False
    return {"turns": sum(counts), "seconds": elapsed, "cpu": used, "statements": COUNTER.count}


# ---------------------------------------------------------------- the sides


async def ours(dsn: str, effects: int, clients: int, seconds: float) -> dict[str, Any]:
    from intention_kernel.durability import open_durability

    url = with_db(dsn, DATABASES["ours"]) + "?schema=ik_bench_peers"
    store = await open_durability(url, setup=True)
    op = operation(effects)
    tag = f"peer{effects}x{os.getpid()}"

    async def turn(c: int, n: int) -> None:
        await store.with_turn(f"{tag}-{c}", f"t{n}", op)

    try:
        return await drive(turn, clients, seconds)
    finally:
        await store.close()


class GraphState(TypedDict, total=False):
    message: str
    reply: dict[str, Any]
    facts: dict[str, Any]


async def langgraph(dsn: str, clients: int, seconds: float) -> dict[str, Any]:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.graph import END, START, StateGraph
    from psycopg_pool import AsyncConnectionPool

    async def node(state: GraphState) -> GraphState:
        return {"reply": REPLY, "facts": STATE}

    builder = StateGraph(GraphState)
    builder.add_node("answer", node)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    url = with_db(dsn, DATABASES["langgraph"])
    kwargs = {"autocommit": True, "prepare_threshold": 0}
    pool_of = AsyncConnectionPool(url, min_size=1, max_size=clients + 1, kwargs=kwargs, open=False)
    async with pool_of as pool:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        graph = builder.compile(checkpointer=saver)
        tag = f"lg{os.getpid()}"

        async def turn(c: int, n: int) -> None:
            config: RunnableConfig = {"configurable": {"thread_id": f"{tag}-{c}"}}
            await graph.ainvoke({"message": f"turn {n}"}, config)

        return await drive(turn, clients, seconds)


async def dbos(dsn: str, clients: int, seconds: float) -> dict[str, Any]:
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    config: DBOSConfig = {
        "name": "ik-bench",
        "system_database_url": with_db(dsn, DATABASES["dbos"]),
        "sys_db_pool_size": clients + 2,
        "log_level": "WARNING",
    }
    DBOS(config=config)

    @DBOS.step()
    async def send_email(request: dict[str, Any]) -> dict[str, Any]:
        return dict(EFFECT_RESPONSE)

    @DBOS.workflow()
    async def workflow(thread: str, state: dict[str, Any]) -> dict[str, Any]:
        effect = await send_email({"to": "a@example.com", "subject": "hello"})
        return {**REPLY, "effect": effect, "state": state}

    DBOS.launch()
    tag = f"dbos{os.getpid()}"

    async def turn(c: int, n: int) -> None:
        with SetWorkflowID(f"{tag}-{c}-t{n}"):
            await workflow(f"{tag}-{c}", STATE)

    try:
        return await drive(turn, clients, seconds)
    finally:
        DBOS.destroy()


SIDES: dict[str, Callable[[str, int, float], Coroutine[Any, Any, dict[str, Any]]]] = {
    "ours_no_effect": lambda dsn, c, s: ours(dsn, 0, c, s),
    "ours_one_effect": lambda dsn, c, s: ours(dsn, 1, c, s),
    "langgraph": langgraph,
    "dbos": dbos,
}


# ---------------------------------------------------------------- processes and the run


def child(spec: dict[str, Any]) -> None:
    with COUNTER.installed():
        report = asyncio.run(SIDES[spec["side"]](spec["dsn"], spec["clients"], spec["seconds"]))
    print(json.dumps(report), flush=True)


async def cell(probe: Probe, dsn: str, side: str, clients: int, seconds: float) -> dict[str, Any]:
    """One side in a fresh process, measured from the server around its timed window."""
    database = CELL_DATABASE[side]
    spec = {"side": side, "dsn": dsn, "clients": clients, "seconds": seconds}
    load = machine()
    warning = load_warning(side, load)
    if warning:
        print(warning, flush=True)
    await probe.conn.execute("CHECKPOINT")
    with tempfile.TemporaryFile() as errors:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--child",
            json.dumps(spec),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            ready = await asyncio.wait_for(proc.stdout.readline(), 120)
            report: dict[str, Any] | None = None
            if ready.strip() == b"ready":
                before = await probe.snapshot(database)
                sampler = probe.sampler(database)
                busy, mine = machine_cpu(), self_cpu()
                proc.stdin.write(b"go\n")
                await proc.stdin.drain()
                line = await asyncio.wait_for(proc.stdout.readline(), seconds + 120)
                cell_cpu = sampler.stop() if sampler else None  # before the connections close
                busy_after, mine = machine_cpu(), self_cpu() - mine
                with contextlib.suppress(ValueError):
                    report = json.loads(line)
            await asyncio.wait_for(proc.wait(), 120)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return {"error": "timed out", "machine": cell_machine(load, machine())}
        if report is None or proc.returncode != 0:
            errors.seek(0)
            lines = [x for x in errors.read().decode(errors="replace").splitlines() if x.strip()]
            reason = lines[-1] if lines else f"exit status {proc.returncode}"
            return {"error": reason, "machine": cell_machine(load, machine())}
    await probe.wait_idle([database])
    after = await probe.snapshot(database)
    turns = int(report["turns"])
    out: dict[str, Any] = {
        "turns": turns,
        "turns_per_s": round(turns / float(report["seconds"]), 1),
        "client_cpu_us_per_turn": cpu_us_per_turn(float(report["cpu"]), turns),
    }
    out.update(await probe.delta(before, after, turns, cell_cpu, database))
    if probe.statements and out.get("statements_per_turn") is not None:
        out["statements_from"] = "pg_stat_statements"
    elif side.startswith("ours"):
        out["statements_per_turn"] = per_turn(int(report["statements"]), turns)
        out["statements_from"] = "client: asyncpg calls counted in the benchmark process"
    else:
        out["statements_per_turn"] = None
        out["statements_from"] = "not measured (no pg_stat_statements; the peer uses psycopg)"
    client, server = out["client_cpu_us_per_turn"], out.get("server_cpu_us_per_turn")
    out["cpu_us_per_turn"] = None if server is None else round(client + server, 1)
    ours = None if cell_cpu is None else float(report["cpu"]) + cell_cpu + mine
    others = others_share(busy, busy_after, ours)
    out["machine"] = cell_machine(load, machine(), others)
    warning = others_warning(side, others)
    if warning:
        print(warning, flush=True)
    return out


def setup(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for db in DATABASES.values():
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone():
                continue
            conn.execute(f'CREATE DATABASE "{db}"')


MEDIANS = (
    "turns_per_s",
    "statements_per_turn",
    "xact_commit_per_turn",
    "commit_records_per_turn",
    "wal_sync_per_turn",
    "db_wal_records_per_turn",
    "db_wal_bytes_per_turn",
    "db_wal_fpi_per_turn",
    "wal_records_per_turn",
    "wal_bytes_per_turn",
    "client_cpu_us_per_turn",
    "server_cpu_us_per_turn",
    "cpu_us_per_turn",
)


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


async def run(args: argparse.Namespace) -> dict[str, Any]:
    setup(args.dsn)
    probe = await Probe.open(args.dsn)
    started = machine()
    reps: list[dict[str, Any]] = []
    try:
        for rep in range(args.reps):
            results: dict[str, Any] = {}
            for side in SIDES:
                results[side] = await cell(probe, args.dsn, side, args.clients, args.seconds)
            for ours_side, peer in PAIRS:
                a, b = results[ours_side], results[peer]
                if "turns_per_s" in a and "turns_per_s" in b:
                    results[f"ratio_vs_{peer}"] = ratio(a["turns_per_s"], b["turns_per_s"])
                    cpu = ratio(a.get("cpu_us_per_turn"), b.get("cpu_us_per_turn"))
                    results[f"cpu_ratio_vs_{peer}"] = cpu
            reps.append(results)
            shown = [f"{s} {results[s].get('turns_per_s', results[s].get('error'))}" for s in SIDES]
            print(
                f"rep {rep + 1}: "
                + ", ".join(shown)
                + "".join(f", ours/{p} {results.get(f'ratio_vs_{p}')}x" for _, p in PAIRS),
                flush=True,
            )
    finally:
        await probe.close()
    median: dict[str, Any] = {}
    for side in SIDES:
        ran = [r[side] for r in reps if "turns_per_s" in r[side]]
        median[side] = {key: _median([r.get(key) for r in ran]) for key in MEDIANS}
        median[side]["statements_from"] = ran[0]["statements_from"] if ran else None
        errors = sorted({r[side]["error"] for r in reps if "error" in r[side]})
        if errors:
            median[side]["errors"] = errors
    ratios: dict[str, float | None] = {}
    for _, peer in PAIRS:
        for kind in ("ratio", "cpu_ratio"):
            ratios[f"{kind}_vs_{peer}"] = _median([r.get(f"{kind}_vs_{peer}") for r in reps])
    overloaded = sum(
        bool(r[s]["machine"]["overloaded"]) for r in reps for s in SIDES if "machine" in r[s]
    )
    return {
        "benchmark": "peers",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.seconds < 10 or args.reps < 3,
        "settings": {
            "seconds": args.seconds,
            "reps": args.reps,
            "clients": args.clients,
            "process": "one fresh process per cell, one asyncio task per client",
            "langgraph": "one-node StateGraph, AsyncPostgresSaver (psycopg pool), same server",
            "dbos": "workflow + one step, system database on the same server",
            "checkpoint_before_each_cell": True,
        },
        "server": {
            "statements_counted_by": "pg_stat_statements" if probe.statements else "client",
            "wal_counted_by": "pg_walinspect" if probe.walinspect else "pg_stat_wal (cluster)",
            "server_cpu_from": "/proc" if probe.postmaster else "not measured",
        },
        "machine_at_start": started,
        "machine_at_end": machine(),
        "overloaded_cells": overloaded,
        "median": median,
        **ratios,
        "reps": reps,
        "goals": {"ratio_vs_langgraph": 10, "ratio_vs_dbos": 6},
    }


def print_table(report: dict[str, Any]) -> None:
    columns = [
        ("turns/s", "turns_per_s"),
        ("stmts", "statements_per_turn"),
        ("xacts", "xact_commit_per_turn"),
        ("commit rec", "commit_records_per_turn"),
        ("wal sync", "wal_sync_per_turn"),
        ("wal rec", "db_wal_records_per_turn"),
        ("wal B", "db_wal_bytes_per_turn"),
        ("client us", "client_cpu_us_per_turn"),
        ("server us", "server_cpu_us_per_turn"),
        ("cpu us", "cpu_us_per_turn"),
    ]
    print(f"{'side':<17}" + "".join(f"{t:>11}" for t, _ in columns))
    for side, m in report["median"].items():
        print(f"{side:<17}" + "".join(f"{table_cell(m.get(k)):>11}" for _, k in columns))
        for error in m.get("errors", []):
            print(f"  {side} failed: {error}")
    for ours_side, peer in PAIRS:
        print(
            f"{ours_side} / {peer}: {table_cell(report[f'ratio_vs_{peer}'])}x turns/s,"
            f" {table_cell(report[f'cpu_ratio_vs_{peer}'])}x CPU per turn"
            " (above 1, ours costs more)"
        )
    print(
        f"per turn, medians over repetitions; statements from"
        f" {report['server']['statements_counted_by']}"
    )
    start, end = report["machine_at_start"], report["machine_at_end"]
    total = len(SIDES) * report["settings"]["reps"]
    shares = [
        r[s]["machine"]["others_cpu_share"]
        for r in report["reps"]
        for s in SIDES
        if "turns" in r[s]
    ]
    measured = [x for x in shares if x is not None]
    print(
        f"load {start['loadavg'][0]} at start, {end['loadavg'][0]} at end on {start['cpus']}"
        f" cores; other work used up to {max(measured, default=0):.0%} of the cores during a"
        f" cell; {report['overloaded_cells']} of {total} cells flagged (other work above"
        f" {OTHERS_LIMIT:.0%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    report = asyncio.run(run(args))
    print()
    print_table(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
