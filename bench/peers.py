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

Ratios ours/peer are taken within each repetition (no effect vs LangGraph, one effect vs DBOS)
and the medians reported, with client CPU per turn and the machine load. Writes
``bench/results/peers.json``. A peer that cannot be imported or started is reported with the
reason instead of a figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _payloads import EFFECT_RESPONSE, REPLY, STATE, operation

RESULTS = Path(__file__).resolve().parent / "results" / "peers.json"
DEFAULT_DSN = os.environ.get("IK_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
DATABASES = {"ours": "ik_bench", "langgraph": "ik_bench_langgraph", "dbos": "ik_bench_dbos"}
PAIRS = (("ours_no_effect", "langgraph"), ("ours_one_effect", "dbos"))


def with_db(dsn: str, db: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{db}"))


def machine() -> dict[str, Any]:
    one, five, fifteen = os.getloadavg()
    return {"cpus": os.cpu_count(), "loadavg": [round(one, 2), round(five, 2), round(fifteen, 2)]}


def cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


Turn = Callable[[int, int], Awaitable[None]]


async def drive(turn: Turn, clients: int, seconds: float) -> dict[str, Any]:
    """Warm each client up with one turn, then run turns until the deadline."""
    await asyncio.gather(*(turn(c, 0) for c in range(clients)))
    counts = [0] * clients
    started, cpu = time.monotonic(), cpu_now()
    deadline = started + seconds

    async def client(c: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            await turn(c, n)
            counts[c] = n

    await asyncio.gather(*(client(c) for c in range(clients)))
    return {"turns": sum(counts), "seconds": time.monotonic() - started, "cpu": cpu_now() - cpu}


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
    report = asyncio.run(SIDES[spec["side"]](spec["dsn"], spec["clients"], spec["seconds"]))
    print(json.dumps(report))


def cell(dsn: str, side: str, clients: int, seconds: float) -> dict[str, Any]:
    spec = {"side": side, "dsn": dsn, "clients": clients, "seconds": seconds}
    load = machine()
    out = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
        timeout=seconds + 120,
    )
    if out.returncode != 0:
        lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
        return {"error": lines[-1] if lines else f"exit status {out.returncode}", "machine": load}
    report = json.loads(out.stdout.strip().splitlines()[-1])
    turns = int(report["turns"])
    return {
        "turns": turns,
        "turns_per_s": round(turns / float(report["seconds"]), 1),
        "client_cpu_us_per_turn": round(float(report["cpu"]) / max(turns, 1) * 1e6, 1),
        "machine": load,
    }


def setup(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for db in DATABASES.values():
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone():
                continue
            conn.execute(f'CREATE DATABASE "{db}"')


def run(args: argparse.Namespace) -> dict[str, Any]:
    setup(args.dsn)
    started = machine()
    reps: list[dict[str, Any]] = []
    for rep in range(args.reps):
        results = {side: cell(args.dsn, side, args.clients, args.seconds) for side in SIDES}
        for ours_side, peer in PAIRS:
            a, b = results[ours_side], results[peer]
            if "turns_per_s" in a and "turns_per_s" in b:
                results[f"ratio_vs_{peer}"] = round(a["turns_per_s"] / b["turns_per_s"], 3)
        reps.append(results)
        shown = [f"{s} {results[s].get('turns_per_s', results[s].get('error'))}" for s in SIDES]
        print(
            f"rep {rep + 1}: "
            + ", ".join(shown)
            + "".join(f", ours/{p} {results.get(f'ratio_vs_{p}')}x" for _, p in PAIRS),
            flush=True,
        )
    median: dict[str, Any] = {}
    for side in SIDES:
        values = [r[side]["turns_per_s"] for r in reps if "turns_per_s" in r[side]]
        errors = sorted({r[side]["error"] for r in reps if "error" in r[side]})
        median[side] = {"turns_per_s": round(statistics.median(values), 1) if values else None}
        cpu = [r[side]["client_cpu_us_per_turn"] for r in reps if "turns_per_s" in r[side]]
        median[side]["client_cpu_us_per_turn"] = round(statistics.median(cpu), 1) if cpu else None
        if errors:
            median[side]["errors"] = errors
    ratios = {}
    for _, peer in PAIRS:
        values = [r[f"ratio_vs_{peer}"] for r in reps if f"ratio_vs_{peer}" in r]
        ratios[f"ratio_vs_{peer}"] = round(statistics.median(values), 3) if values else None
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
        },
        "machine_at_start": started,
        "machine_at_end": machine(),
        "median": median,
        **ratios,
        "reps": reps,
        "goals": {"ratio_vs_langgraph": 10, "ratio_vs_dbos": 6},
    }


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
    report = run(args)
    print()
    print(f"{'side':<17}{'turns/s':>9}{'client us/turn':>16}")
    for side, m in report["median"].items():
        print(f"{side:<17}{m['turns_per_s']!s:>9}{m['client_cpu_us_per_turn']!s:>16}")
    for _, peer in PAIRS:
        print(f"ours / {peer}: {report[f'ratio_vs_{peer}']}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
