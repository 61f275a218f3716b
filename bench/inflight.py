"""Turns in flight: thousands of turns waiting on slow model calls in one process, ours and
the peers on the same PostgreSQL, in the same run (not a timed test).

    .venv/bin/python bench/inflight.py [--in-flight 100,500,2000] [--seconds 20] [--reps 3]
    .venv/bin/python bench/inflight.py --quick      # 100 and 2,000 in flight, 8 s, 1 repetition

Peers come with the bench extra: ``pip install -e '.[bench]'``. For every in-flight level N
and every side, a fresh process keeps N turns going, one per slot, each slot on its own thread:
a turn opens, waits 1-3 s on a simulated model call (``asyncio.sleep``, the same schedule on
every side, ``_inflight_plan``), records 0 or 1 effect (half the turns each) and commits the
~2 KB reply and ~4 KB state of ``_payloads``. The sides (``_inflight_sides``):

- ``ours``: ``with_turn`` on the PostgreSQL store, default lease (10 s, heartbeat every 3.3 s:
  few turns live long enough to renew);
- ``ours_ttl3``: the same with ``lease_ttl=3`` (heartbeat every second: most turns renew once
  or twice, and renewals due together go as one statement);
- ``langgraph``: a one-node graph with ``AsyncPostgresSaver`` whose node sleeps;
- ``dbos``: a workflow whose first step sleeps (the model call), then one effect step.

Every side gets a pool of ``--pool`` connections (default 20). Each cell seeds its slots' threads
with one turn each (32 at a time, no wait), says ``ready`` and waits for ``go``; then for
``--seconds`` every slot starts its next turn as soon as the last ended (``--turns`` caps the
turns started, 0 for none), and the cell ends when every started turn has. Measured:

- turns/s: turns finished before the deadline / ``--seconds``, also as a share of the turns a
  side with no cost at all would finish on the same schedule (``ideal``); all turns / the whole
  window with the drain (``turns_per_s_drained``); each turn's time beyond its model wait;
- statements: ours, every asyncpg call of the window counted on the client (heartbeats
  included; renewal statements and commit statements by size read from the store); every
  side, committed transactions of its database (``pg_stat_database.xact_commit``), per turn
  and per second; WAL as in ``peers`` (``_server.Probe``);
- CPU per turn: the cell's process (``getrusage``) plus its backends and the WAL processes
  (``_server.CpuSampler``), over the whole window and drain, divided by the turns finished;
- memory: the process's resident size read every 20 ms during the window, its peak minus the
  size at ``ready`` (after seeding at 32 at a time and a garbage collection), per turn in
  flight; with ``--tracemalloc``, the peak of Python allocations too (it slows every side:
  its CPU figures are then not comparable);
- open connections: the peak of ``pg_stat_activity`` rows of the cell's database, read every
  100 ms from another database.

Ratios ours/peer (turns/s, CPU per turn) are taken within each repetition and level, and the
medians over repetitions reported. Writes ``bench/results/inflight.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import asyncpg
from _inflight_plan import MEAN_WAIT, ideal_turns, per_in_flight
from _measure import (
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
from _server import Probe
from peers import DATABASES, DEFAULT_DSN, setup

RESULTS = Path(__file__).resolve().parent / "results" / "inflight.json"
CELLS: dict[str, dict[str, Any]] = {
    "ours": {"kind": "ours", "lease_ttl": 10.0},
    "ours_ttl3": {"kind": "ours", "lease_ttl": 3.0},
    "langgraph": {"kind": "langgraph"},
    "dbos": {"kind": "dbos"},
}
OURS, PEERS = ("ours", "ours_ttl3"), ("langgraph", "dbos")
SETTLE = 1.5
"""Seconds between ``ready`` and the opening snapshot: an idle backend reports its counters
within a second, so the seeding's transactions are not counted in the window."""


async def _lines(stream: asyncio.StreamReader, want: str, within: float) -> str | None:
    """The first line starting with ``want`` (a peer may print other lines first)."""
    deadline = time.monotonic() + within
    while True:
        line = await asyncio.wait_for(stream.readline(), max(0.1, deadline - time.monotonic()))
        if not line:
            return None
        if line.strip().startswith(want.encode()):
            return line.decode()


async def _watch(conn: Any, database: str, peak: list[int], stop: asyncio.Event) -> None:
    query = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
    while not stop.is_set():
        peak[0] = max(peak[0], int(await conn.fetchval(query, database)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


async def cell(probe: Probe, watch: Any, args: argparse.Namespace, side: str, n: int) -> Any:
    """One side at ``n`` turns in flight, in a fresh process, measured around its window."""
    database = DATABASES[CELLS[side]["kind"]]
    spec = {**CELLS[side], "dsn": args.dsn, "in_flight": n, "seconds": args.seconds}
    spec.update(cap=args.turns, pool=args.pool, tracemalloc=args.tracemalloc)
    load = machine()
    if warning := load_warning(f"{side} {n}", load):
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
            limit=2**20,
        )
        assert proc.stdin is not None and proc.stdout is not None
        report: dict[str, Any] | None = None
        try:
            if await _lines(proc.stdout, "ready", 600):
                await asyncio.sleep(SETTLE)  # the seeding's statistics reach the server
                before = await probe.snapshot(database)
                peak, stop = [0], asyncio.Event()
                watcher = asyncio.create_task(_watch(watch, database, peak, stop))
                sampler = probe.sampler(database)
                busy, mine = machine_cpu(), self_cpu()
                proc.stdin.write(b"go\n")
                await proc.stdin.drain()
                line = await _lines(proc.stdout, "{", args.seconds + 300)
                cell_cpu = sampler.stop() if sampler else None  # before the connections close
                busy_after, mine = machine_cpu(), self_cpu() - mine
                stop.set()
                await watcher
                with contextlib.suppress(ValueError, TypeError):
                    report = json.loads(line or "")
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
    out = await _figures(probe, args, side, n, report, (before, after, cell_cpu), peak[0])
    ours = None if cell_cpu is None else float(report["cpu"]) + cell_cpu + mine
    others = others_share(busy, busy_after, ours)
    out["machine"] = cell_machine(load, machine(), others)
    if warning := others_warning(f"{side} {n}", others):
        print(warning, flush=True)
    return out


async def _figures(
    probe: Probe,
    args: argparse.Namespace,
    side: str,
    n: int,
    report: dict[str, Any],
    server: tuple[Any, Any, float | None],
    connections: int,
) -> dict[str, Any]:
    before, after, cell_cpu = server
    turns, elapsed = int(report["turns"]), float(report["seconds"])
    capped = bool(report["capped"])
    rate = turns / elapsed if capped else int(report["in_window"]) / args.seconds
    ideal = None if capped else ideal_turns(n, args.seconds) / args.seconds
    xacts = after.database["xact_commit"] - before.database["xact_commit"]
    out: dict[str, Any] = {
        "in_flight": n,
        "turns": turns,
        "turns_per_s": round(rate, 1),
        "ideal_turns_per_s": None if ideal is None else round(ideal, 1),
        "of_ideal": ratio(rate, ideal),
        "turns_per_s_drained": round(turns / elapsed, 1),
        "window_s": round(elapsed, 2),
        "errors": report["errors"],
        "overhead_ms_p50": report["overhead_ms_p50"],
        "overhead_ms_p99": report["overhead_ms_p99"],
        "xacts_per_s": round(xacts / elapsed, 1),
        "client_cpu_us_per_turn": cpu_us_per_turn(float(report["cpu"]), turns),
        "rss_kib_per_in_flight": per_in_flight(report["rss_peak"] - report["rss_base"], n),
        "rss_base_mib": round(report["rss_base"] / 2**20, 1),
        "rss_peak_mib": round(report["rss_peak"] / 2**20, 1),
        "connections_peak": connections,
    }
    if report.get("traced_peak") is not None:
        out["traced_kib_per_in_flight"] = per_in_flight(report["traced_peak"], n)
    out.update(await probe.delta(before, after, turns, cell_cpu, DATABASES[CELLS[side]["kind"]]))
    if side in OURS:
        out["statements_per_turn"] = per_turn(int(report["statements"]), turns)
        out["statements_per_s"] = round(int(report["statements"]) / elapsed, 1)
        out["renewal_statements_per_turn"] = per_turn(int(report["renewal_statements"]), turns)
        out["commit_statements_by_size"] = report["commit_statements_by_size"]
        out["acquire_statements_by_size"] = report["acquire_statements_by_size"]
        out["statements_from"] = "client: asyncpg calls counted in the cell's process"
    elif out.get("statements_per_turn") is None:
        out["statements_from"] = "not measured (no pg_stat_statements; the peer uses psycopg)"
    client, server_us = out["client_cpu_us_per_turn"], out.get("server_cpu_us_per_turn")
    out["cpu_us_per_turn"] = None if server_us is None else round(client + server_us, 1)
    return out


COLUMNS = (
    ("turns/s", "turns_per_s"),
    ("ideal", "of_ideal"),
    ("stmts", "statements_per_turn"),
    ("stmt/s", "statements_per_s"),
    ("renew", "renewal_statements_per_turn"),
    ("xacts", "xact_commit_per_turn"),
    ("xact/s", "xacts_per_s"),
    ("client us", "client_cpu_us_per_turn"),
    ("server us", "server_cpu_us_per_turn"),
    ("cpu us", "cpu_us_per_turn"),
    ("KiB/turn", "rss_kib_per_in_flight"),
    ("conns", "connections_peak"),
    ("p99 ms", "overhead_ms_p99"),
)
EXTRA = (
    "ideal_turns_per_s",
    "turns_per_s_drained",
    "wal_sync_per_turn",
    "db_wal_bytes_per_turn",
    "overhead_ms_p50",
)
MEDIANS = (*(key for _, key in COLUMNS), *EXTRA, "traced_kib_per_in_flight")


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


async def run(args: argparse.Namespace) -> dict[str, Any]:
    setup(args.dsn)
    probe = await Probe.open(args.dsn)
    watch = await asyncpg.connect(args.dsn)
    started = machine()
    reps: list[dict[str, Any]] = []
    try:
        for rep in range(args.reps):
            results: dict[str, Any] = {}
            for n in args.in_flight:
                level: dict[str, Any] = {}
                for side in args.sides:
                    level[side] = await cell(probe, watch, args, side, n)
                    shown = level[side].get("turns_per_s", level[side].get("error"))
                    print(f"rep {rep + 1}, {n} in flight, {side}: {shown} turns/s", flush=True)
                for ours in (s for s in OURS if s in level):
                    for peer in (p for p in PEERS if p in level):
                        a, b = level[ours], level[peer]
                        level[f"{ours}/{peer}"] = {
                            "turns_per_s": ratio(a.get("turns_per_s"), b.get("turns_per_s")),
                            "cpu_per_turn": ratio(
                                a.get("cpu_us_per_turn"), b.get("cpu_us_per_turn")
                            ),
                        }
                results[str(n)] = level
            reps.append(results)
    finally:
        await watch.close()
        await probe.close()
    median: dict[str, Any] = {}
    for n in map(str, args.in_flight):
        median[n] = {}
        for side in args.sides:
            ran = [r[n][side] for r in reps if "turns_per_s" in r[n][side]]
            figures = {key: _median([r.get(key) for r in ran]) for key in MEDIANS}
            figures["statements_from"] = ran[0].get("statements_from") if ran else None
            if errors := sorted({r[n][side]["error"] for r in reps if "error" in r[n][side]}):
                figures["errors"] = errors
            median[n][side] = figures
        for pair in (k for k in reps[0][n] if "/" in k):
            median[n][pair] = {
                kind: _median([r[n][pair][kind] for r in reps])
                for kind in ("turns_per_s", "cpu_per_turn")
            }
    flagged = sum(
        bool(c["machine"]["overloaded"])
        for r in reps
        for level in r.values()
        for side, c in level.items()
        if "/" not in side and "machine" in c
    )
    return {
        "benchmark": "inflight",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.seconds < 20 or args.reps < 3,
        "settings": {
            "in_flight": args.in_flight,
            "seconds": args.seconds,
            "turns_cap": args.turns,
            "reps": args.reps,
            "pool": args.pool,
            "sides": args.sides,
            "model_wait_s": "1-3, mean 2 (same schedule on every side)",
            "effects": "0 or 1, alternating per slot (half the turns)",
            "tracemalloc": args.tracemalloc,
            "process": "one fresh process per cell, one asyncio task per slot",
            "checkpoint_before_each_cell": True,
        },
        "server": {
            "statements_counted_by": "pg_stat_statements" if probe.statements else "client (ours)",
            "wal_counted_by": "pg_walinspect" if probe.walinspect else "pg_stat_wal (cluster)",
            "server_cpu_from": "/proc" if probe.postmaster else "not measured",
        },
        "machine_at_start": started,
        "machine_at_end": machine(),
        "overloaded_cells": flagged,
        "median": median,
        "reps": reps,
        "goals": {
            "statements_per_turn": "independent of the turns in flight",
            "rss_kib_per_in_flight": 50,
            "ours/langgraph and ours/dbos": "turns/s above 1, CPU per turn below 1",
        },
    }


def print_table(report: dict[str, Any]) -> None:
    print(f"{'in flight':>9} {'side':<10}" + "".join(f"{t:>10}" for t, _ in COLUMNS))
    for n, level in report["median"].items():
        for side, m in level.items():
            if "/" in side:
                continue
            print(f"{n:>9} {side:<10}" + "".join(f"{table_cell(m.get(k)):>10}" for _, k in COLUMNS))
            for error in m.get("errors", []):
                print(f"  {side} at {n} failed: {error}")
        for pair, r in ((k, v) for k, v in level.items() if "/" in k):
            print(
                f"{'':>9} {pair}: {table_cell(r['turns_per_s'])}x turns/s,"
                f" {table_cell(r['cpu_per_turn'])}x CPU per turn"
            )
    for ours in (s for s in OURS if s in report["settings"]["sides"]):
        by = [
            f"{n}: {table_cell(level[ours]['statements_per_turn'])}"
            for n, level in report["median"].items()
        ]
        print(f"{ours} statements per turn by turns in flight: " + ", ".join(by))
    start, end = report["machine_at_start"], report["machine_at_end"]
    print(
        f"medians over {report['settings']['reps']} repetition(s); model wait 1-3 s (mean"
        f" {MEAN_WAIT:g}); ideal = share of the turns a zero-cost side finishes; load"
        f" {start['loadavg'][0]} at start, {end['loadavg'][0]} at end on {start['cpus']} cores;"
        f" {report['overloaded_cells']} cell(s) flagged for other work"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--in-flight", default="100,500,2000")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--turns", type=int, default=0, help="cap on turns started per cell")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--pool", type=int, default=20)
    parser.add_argument("--sides", default=",".join(CELLS))
    parser.add_argument("--quick", action="store_true", help="100 and 2000, 8 s, 1 repetition")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        from _inflight_sides import child

        child(json.loads(args.child))
        return
    if args.quick:
        args.in_flight, args.seconds, args.reps = "100,2000", 8.0, 1
    args.in_flight = [int(x) for x in str(args.in_flight).split(",")]
    args.sides = [s for s in args.sides.split(",") if s in CELLS]
    report = asyncio.run(run(args))
    print()
    print_table(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
