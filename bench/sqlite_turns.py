"""SQLite turn throughput next to a raw ``sqlite3`` loop doing the same durable work, in one run.

    .venv/bin/python bench/sqlite_turns.py [--seconds 10] [--reps 3] [--dir DIR]

For a turn without effects and a turn with one effect, with 1 and 8 threads in flight, each
repetition runs two cells one after the other, each in a fresh process on a fresh database file:

- ours: the store through its public API (``open_durability("sqlite:///...")``, ``with_turn``,
  ``run_effect``, ``commit``), one process, one asyncio task per thread (as the store is used);
- raw: plain ``sqlite3`` (WAL, ``synchronous=FULL``), one OS thread per thread sharing one
  connection, one transaction at a time (as the store uses its one connection), writing the
  same bytes in the same transactions: a no-effect turn is one
  ``BEGIN IMMEDIATE`` transaction (load the checkpoint, insert the result, move the head,
  insert three outbox events); a one-effect turn first commits the ``prepared`` receipt and
  then the ``completed`` one (three commits).

Ratios ours/raw (turns/s, and client CPU per turn: the whole process, ``getrusage``) are taken
within each repetition and the medians reported, with the load before and after every cell (a
warning is printed when the 1-minute load before a cell exceeds the cores). Then, in separate
short runs of a fixed number of turns: fsyncs per turn (``strace -f -c -e
trace=fsync,fdatasync``, minus a run of zero turns, when strace is installed), commits and
statements per turn (counted with ``sqlite3``'s trace callback), and the per-turn time on a
thread of 10 turns vs 10,000. Writes ``bench/results/sqlite_turns.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import (
    OTHERS_LIMIT,
    cell_machine,
    children_cpu,
    cpu_us_per_turn,
    load_warning,
    machine,
    machine_cpu,
    others_share,
    others_warning,
    ratio,
    self_cpu,
)
from _payloads import (
    EFFECT_REQUEST,
    EFFECT_RESPONSE,
    EVENTS,
    REPLY,
    STATE,
    operation,
)

from intention_kernel import DurableTurnResult, KernelCheckpoint, KernelEvent
from intention_kernel.durability import open_durability

RESULTS = Path(__file__).resolve().parent / "results" / "sqlite_turns.json"
KINDS = ((0, "no effect"), (1, "one effect"))


def cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------- ours


async def ours(db: Path, effects: int, threads: int, seconds: float, turns: int) -> dict[str, Any]:
    """Run for ``seconds`` (or exactly ``turns`` turns per thread when ``turns`` > 0)."""
    store = await open_durability(f"sqlite:///{db}")
    op = operation(effects)
    names = [f"thread-{i}" for i in range(threads)]
    await asyncio.gather(*(store.with_turn(t, "seed", op) for t in names))
    counts = [0] * threads
    started, cpu = time.monotonic(), cpu_now()
    deadline = started + seconds

    async def client(slot: int, thread: str) -> None:
        n = 0
        while (n < turns) if turns else (time.monotonic() < deadline):
            n += 1
            await store.with_turn(thread, f"t{n}", op)
            counts[slot] = n

    await asyncio.gather(*(client(i, t) for i, t in enumerate(names)))
    report = {
        "turns": sum(counts),
        "seconds": time.monotonic() - started,
        "cpu": cpu_now() - cpu,
        "groups": dict(store.commit_groups),  # type: ignore[attr-defined]
    }
    await store.close()
    return report


# ---------------------------------------------------------------- raw sqlite3

RAW_SCHEMA = """
CREATE TABLE IF NOT EXISTS heads (thread_id TEXT PRIMARY KEY, revision INTEGER NOT NULL,
                                  turn_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS turns (thread_id TEXT NOT NULL, turn_id TEXT NOT NULL,
                                  revision INTEGER NOT NULL, result TEXT NOT NULL,
                                  PRIMARY KEY (thread_id, turn_id));
CREATE TABLE IF NOT EXISTS outbox (position INTEGER PRIMARY KEY AUTOINCREMENT,
                                   thread_id TEXT NOT NULL, turn_id TEXT NOT NULL,
                                   sequence INTEGER NOT NULL, document TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS receipts (thread_id TEXT NOT NULL, idempotency_key TEXT NOT NULL,
                                     status TEXT NOT NULL, document TEXT NOT NULL,
                                     PRIMARY KEY (thread_id, idempotency_key));
"""


def _documents() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The JSON the store writes for a turn's result and events, as plain dicts."""
    result = DurableTurnResult(
        thread_id="THREAD",
        turn_id="TURN",
        trace_id="trace-TURN",
        response={**REPLY, "effect": EFFECT_RESPONSE},
        checkpoint=KernelCheckpoint(revision=1, agent_fingerprint="bench@1", metadata=STATE),
    ).model_dump(mode="json")
    events = [
        KernelEvent(
            id=f"evt-THREAD-TURN-{i}",
            type=kind,
            occurred_at=datetime.now(UTC),
            thread_id="THREAD",
            turn_id="TURN",
            sequence=i,
            correlation_id="trace-TURN",
            data={"body": body},
        ).model_dump(mode="json")
        for i, (kind, body) in enumerate(EVENTS)
    ]
    return result, events


def raw_connection(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(db), isolation_level=None, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


class _Locked:
    """A connection shared by the threads of a process, one transaction at a time (as the
    store uses its one connection); an uncontended lock when there is one thread."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()


class RawTurns:
    """The turns of one thread, written as a plain sqlite3 program would."""

    def __init__(self, shared: _Locked, thread: str, effects: int) -> None:
        self.shared = shared
        self.thread = thread
        self.effects = effects
        self.result, self.events = _documents()

    def turn(self, turn_id: str) -> None:
        conn, lock, thread = self.shared.conn, self.shared.lock, self.thread
        for i in range(self.effects):
            key = f"send_email:{turn_id}:{i}"
            receipt = {
                "id": f"rcpt-{thread}-{turn_id}-{i}",
                "thread_id": thread,
                "turn_id": turn_id,
                "idempotency_key": key,
                "capability_id": "send_email",
                "status": "prepared",
                "request": EFFECT_REQUEST,
                "value": None,
                "updated_at": datetime.now(UTC).isoformat(),
            }
            with lock:
                self._prepare(conn, thread, key, receipt)
            receipt.update(status="completed", value=EFFECT_RESPONSE)
            with lock:
                self._complete(conn, thread, key, receipt)
        with lock:
            self._commit(conn, thread, turn_id)

    def _prepare(
        self, conn: sqlite3.Connection, thread: str, key: str, receipt: dict[str, Any]
    ) -> None:
        conn.execute("BEGIN IMMEDIATE")
        found = conn.execute(
            "SELECT status FROM receipts WHERE thread_id = ? AND idempotency_key = ?",
            (thread, key),
        ).fetchone()
        if found is None:
            conn.execute(
                "INSERT INTO receipts VALUES (?, ?, 'prepared', ?)",
                (thread, key, json.dumps(receipt)),
            )
        conn.execute("COMMIT")

    def _complete(
        self, conn: sqlite3.Connection, thread: str, key: str, receipt: dict[str, Any]
    ) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE receipts SET status = 'completed', document = ?"
            " WHERE thread_id = ? AND idempotency_key = ?",
            (json.dumps(receipt), thread, key),
        )
        conn.execute("COMMIT")

    def _commit(self, conn: sqlite3.Connection, thread: str, turn_id: str) -> None:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(
            "SELECT h.revision, t.result FROM heads h JOIN turns t"
            " ON t.thread_id = h.thread_id AND t.turn_id = h.turn_id WHERE h.thread_id = ?",
            (thread,),
        ).fetchone()
        revision = 1 if row is None else int(row[0]) + 1
        if row is not None:
            json.loads(row[1])  # the loaded checkpoint, as a turn would read it
        result = dict(self.result, thread_id=thread, turn_id=turn_id, trace_id=f"trace-{turn_id}")
        result["checkpoint"] = dict(self.result["checkpoint"], revision=revision)
        conn.execute(
            "INSERT INTO turns VALUES (?, ?, ?, ?)",
            (thread, turn_id, revision, json.dumps(result)),
        )
        conn.execute(
            "INSERT INTO heads VALUES (?, ?, ?) ON CONFLICT (thread_id) DO UPDATE"
            " SET revision = excluded.revision, turn_id = excluded.turn_id",
            (thread, revision, turn_id),
        )
        now = datetime.now(UTC).isoformat()
        conn.executemany(
            "INSERT INTO outbox (thread_id, turn_id, sequence, document) VALUES (?, ?, ?, ?)",
            [
                (
                    thread,
                    turn_id,
                    i,
                    json.dumps(
                        dict(
                            event,
                            id=f"evt-{thread}-{turn_id}-{i}",
                            thread_id=thread,
                            turn_id=turn_id,
                            correlation_id=f"trace-{turn_id}",
                            occurred_at=now,
                        )
                    ),
                )
                for i, event in enumerate(self.events)
            ],
        )
        conn.execute("COMMIT")


def raw(db: Path, effects: int, threads: int, seconds: float, turns: int) -> dict[str, Any]:
    setup = sqlite3.connect(str(db), isolation_level=None)
    setup.execute("PRAGMA journal_mode = WAL")
    setup.executescript(RAW_SCHEMA)
    setup.close()
    shared = _Locked(raw_connection(db))
    workers = [RawTurns(shared, f"thread-{i}", effects) for i in range(threads)]
    for w in workers:
        w.turn("seed")
    counts = [0] * threads
    barrier = threading.Barrier(threads + 1)
    deadline = [0.0]

    failures: list[BaseException] = []

    def loop(slot: int) -> None:
        barrier.wait()
        n = 0
        try:
            while (n < turns) if turns else (time.monotonic() < deadline[0]):
                n += 1
                workers[slot].turn(f"t{n}")
                counts[slot] = n
        except BaseException as exc:
            failures.append(exc)

    pool = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    started, cpu = time.monotonic(), cpu_now()
    deadline[0] = started + seconds
    barrier.wait()
    for t in pool:
        t.join()
    if failures:
        raise failures[0]
    report = {"turns": sum(counts), "seconds": time.monotonic() - started, "cpu": cpu_now() - cpu}
    shared.conn.close()
    return report


# ---------------------------------------------------------------- child processes


def child(spec: dict[str, Any]) -> None:
    db, effects, threads = Path(spec["db"]), spec["effects"], spec["threads"]
    seconds, turns = float(spec.get("seconds", 0)), int(spec.get("turns", 0))
    counted = {"statements": 0, "commits": 0}
    if spec.get("trace"):
        connect = sqlite3.connect

        def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn: sqlite3.Connection = connect(*args, **kwargs)

            def seen(statement: str) -> None:
                counted["statements"] += 1
                if statement.strip().upper().startswith(("COMMIT", "END")):
                    counted["commits"] += 1

            conn.set_trace_callback(seen)
            return conn

        sqlite3.connect = traced  # type: ignore[assignment]
    if spec["side"] == "ours":
        report = asyncio.run(ours(db, effects, threads, seconds, turns))
    else:
        report = raw(db, effects, threads, seconds, turns)
    print(json.dumps({**report, **counted}))


def run_child(spec: dict[str, Any], prefix: list[str] | None = None) -> dict[str, Any]:
    command = [*(prefix or []), sys.executable, __file__, "--child", json.dumps(spec)]
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark process failed: {out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def cell(directory: Path, side: str, effects: int, threads: int, seconds: float) -> dict[str, Any]:
    db = directory / f"{side}-{effects}-{threads}-{time.monotonic_ns()}.db"
    load = machine()
    warning = load_warning(f"effects={effects} threads={threads} {side}", load)
    if warning:
        print(warning, flush=True)
    busy, mine, children = machine_cpu(), self_cpu(), children_cpu()
    report = run_child(
        {"side": side, "db": str(db), "effects": effects, "threads": threads, "seconds": seconds}
    )
    ours = self_cpu() - mine + children_cpu() - children  # the whole child process, and us
    others = others_share(busy, machine_cpu(), ours)
    warning = others_warning(f"effects={effects} threads={threads} {side}", others)
    if warning:
        print(warning, flush=True)
    turns = int(report["turns"])
    groups = {int(size): count for size, count in report.get("groups", {}).items()}
    return {
        "turns": turns,
        "turns_per_s": round(turns / float(report["seconds"]), 1),
        **({"write_transactions_by_size": groups, "mean_group": _mean(groups)} if groups else {}),
        "client_cpu_us_per_turn": cpu_us_per_turn(float(report["cpu"]), turns),
        "machine": cell_machine(load, machine(), others),
    }


def _mean(groups: dict[int, int]) -> float:
    """Write jobs per write transaction (1.0: no group formed)."""
    transactions = sum(groups.values())
    return round(sum(size * n for size, n in groups.items()) / transactions, 2)


# ---------------------------------------------------------------- per-turn counts


def _strace_fsyncs(log: Path) -> int:
    total = 0
    for line in log.read_text().splitlines():
        match = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)$", line)
        if match:
            total += int(match.group(1))
    return total


def counts(directory: Path, side: str, effects: int, turns: int) -> dict[str, Any]:
    """Commits, statements and (with strace) fsyncs per turn, from runs of a fixed size."""
    runs: dict[int, dict[str, Any]] = {}
    for n in (0, turns):
        db = directory / f"count-{side}-{effects}-{n}.db"
        spec = {"side": side, "db": str(db), "effects": effects, "threads": 1, "turns": n}
        spec["trace"] = True
        prefix = None
        log = directory / f"strace-{side}-{effects}-{n}.txt"
        if shutil.which("strace"):
            prefix = ["strace", "-f", "-c", "-o", str(log), "-e", "trace=fsync,fdatasync"]
        runs[n] = run_child(spec, prefix)
        if prefix:
            runs[n]["fsyncs"] = _strace_fsyncs(log)
    out: dict[str, Any] = {"turns": turns}
    for key in ("commits", "statements", "fsyncs"):
        if key in runs[turns]:
            out[f"{key}_per_turn"] = round((runs[turns][key] - runs[0][key]) / turns, 2)
    return out


# ---------------------------------------------------------------- thread length


async def length_cost(db: Path, long: int, sample: int, rounds: int) -> dict[str, Any]:
    """Per-turn time on a thread with 10 committed turns vs one with ``long``, in alternating
    rounds (so WAL checkpoints and load changes hit both alike); medians of the rounds."""
    store = await open_durability(f"sqlite:///{db}")
    op = operation(0)
    for i in range(10):
        await store.with_turn("short", f"fill{i}", op)
    for i in range(long):
        await store.with_turn("long", f"fill{i}", op)
    timings: dict[str, list[float]] = {"short": [], "long": []}
    for r in range(rounds):
        for name in ("short", "long"):
            started = time.perf_counter()
            for i in range(sample):
                await store.with_turn(name, f"sample{r}-{i}", op)
            timings[name].append((time.perf_counter() - started) / sample)
    await store.close()
    short, long_ = statistics.median(timings["short"]), statistics.median(timings["long"])
    return {
        "short_turns": 10,
        "long_turns": long,
        "sample_turns_per_round": sample,
        "rounds": rounds,
        "ms_per_turn_short": round(short * 1000, 3),
        "ms_per_turn_long": round(long_ * 1000, 3),
        "ratio": round(long_ / short, 3),
    }


# ---------------------------------------------------------------- the run


def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    started = machine()
    cells: list[dict[str, Any]] = []
    for effects, kind in KINDS:
        for threads in args.threads:
            reps: list[dict[str, Any]] = []
            for rep in range(args.reps):
                order = ["ours", "raw"] if rep % 2 == 0 else ["raw", "ours"]
                results = {s: cell(directory, s, effects, threads, args.seconds) for s in order}
                ours, other = results["ours"], results["raw"]
                speed = ratio(ours["turns_per_s"], other["turns_per_s"])
                cpu = ratio(ours["client_cpu_us_per_turn"], other["client_cpu_us_per_turn"])
                reps.append({**results, "ratio_vs_raw": speed, "cpu_ratio_vs_raw": cpu})
                print(
                    f"{kind:<10} threads={threads} rep {rep + 1}:"
                    f" ours {ours['turns_per_s']}/s, raw {other['turns_per_s']}/s ({speed}x),"
                    f" client CPU per turn {ours['client_cpu_us_per_turn']} vs"
                    f" {other['client_cpu_us_per_turn']} us ({cpu}x),"
                    f" writes per transaction {ours.get('mean_group')}",
                    flush=True,
                )
            cells.append(
                {
                    "turn": kind,
                    "threads": threads,
                    "ratio_vs_raw": round(statistics.median(r["ratio_vs_raw"] for r in reps), 3),
                    "cpu_ratio_vs_raw": round(
                        statistics.median(r["cpu_ratio_vs_raw"] for r in reps), 3
                    ),
                    "overloaded_cells": sum(
                        r[side]["machine"]["overloaded"] for r in reps for side in ("ours", "raw")
                    ),
                    "median": {
                        side: {
                            key: round(statistics.median(r[side][key] for r in reps), 1)
                            for key in ("turns_per_s", "client_cpu_us_per_turn")
                        }
                        for side in ("ours", "raw")
                    },
                    "writes_per_transaction": statistics.median(
                        r["ours"].get("mean_group", 1.0) for r in reps
                    ),
                    "reps": reps,
                }
            )
    per_turn = {
        kind: {side: counts(directory, side, effects, args.count_turns) for side in ("ours", "raw")}
        for effects, kind in KINDS
    }
    length = asyncio.run(
        length_cost(directory / "length.db", args.long_thread, args.length_sample, 5)
    )
    return {
        "benchmark": "sqlite_turns",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.seconds < 10 or args.reps < 3,
        "machine_at_start": started,
        "machine_at_end": machine(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "settings": {
            "seconds": args.seconds,
            "reps": args.reps,
            "threads": args.threads,
            "count_turns": args.count_turns,
            "journal_mode": "wal",
            "synchronous": "FULL",
            "ours": "one process, one asyncio task per thread",
            "raw": "one process, one OS thread per thread, one shared connection",
        },
        "fsyncs_counted_by": "strace -f -c" if shutil.which("strace") else "not measured",
        "commits_counted_by": "sqlite3 trace callback (COMMIT statements)",
        "cells": cells,
        "per_turn": per_turn,
        "thread_length": length,
        "goals": {"ratio_vs_raw": 0.7, "thread_length_ratio_max": 1.1},
    }


def print_table(report: dict[str, Any]) -> None:
    print(
        f"{'turn':<11}{'threads':>8}{'ours/s':>9}{'raw/s':>9}{'ratio':>7}"
        f"{'ours us':>9}{'raw us':>8}{'cpu ratio':>10}{'group':>7}"
        "  per turn (ours | raw): commits, fsyncs, statements"
    )
    for c in report["cells"]:
        m = report["per_turn"][c["turn"]]
        ours, raw_ = c["median"]["ours"], c["median"]["raw"]
        print(
            f"{c['turn']:<11}{c['threads']:>8}{ours['turns_per_s']:>9}"
            f"{raw_['turns_per_s']:>9}{c['ratio_vs_raw']:>7}"
            f"{ours['client_cpu_us_per_turn']:>9}{raw_['client_cpu_us_per_turn']:>8}"
            f"{c['cpu_ratio_vs_raw']:>10}{c['writes_per_transaction']:>7}"
            f"  {m['ours'].get('commits_per_turn')} | {m['raw'].get('commits_per_turn')},"
            f" {m['ours'].get('fsyncs_per_turn')} | {m['raw'].get('fsyncs_per_turn')},"
            f" {m['ours'].get('statements_per_turn')} | {m['raw'].get('statements_per_turn')}"
        )
    print(
        "medians over repetitions; ratio = ours / raw (turns/s); us = client CPU per turn (the"
        " whole process); cpu ratio = ours / raw (above 1, ours costs more); group = write"
        " jobs per write transaction of ours (group commit); commits and"
        f" statements from the sqlite3 trace callback, fsyncs from {report['fsyncs_counted_by']},"
        f" in runs of {report['settings']['count_turns']} turns"
    )
    start, end = report["machine_at_start"], report["machine_at_end"]
    overloaded = sum(c["overloaded_cells"] for c in report["cells"])
    total = 2 * len(report["cells"]) * report["settings"]["reps"]
    shares = [
        r[side]["machine"]["others_cpu_share"]
        for c in report["cells"]
        for r in c["reps"]
        for side in ("ours", "raw")
    ]
    measured = [x for x in shares if x is not None]
    print(
        f"load {start['loadavg'][0]} at start, {end['loadavg'][0]} at end on {start['cpus']}"
        f" cores; other work used up to {max(measured, default=0):.0%} of the cores during a"
        f" cell; {overloaded} of {total} cells flagged (other work above {OTHERS_LIMIT:.0%})"
    )
    length = report["thread_length"]
    print(
        f"thread length 10 vs {length['long_turns']}: {length['ms_per_turn_short']} vs"
        f" {length['ms_per_turn_long']} ms per turn (ratio {length['ratio']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per cell")
    parser.add_argument("--reps", type=int, default=3, help="repetitions; medians reported")
    parser.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=[1, 8])
    parser.add_argument("--count-turns", type=int, default=200, help="turns of the count runs")
    parser.add_argument("--long-thread", type=int, default=10_000)
    parser.add_argument("--length-sample", type=int, default=60, help="turns per round")
    parser.add_argument("--dir", type=Path, help="for the database files (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    with tempfile.TemporaryDirectory(prefix="ik-bench-", dir=args.dir) as tmp:
        report = run(args, Path(tmp))
    print()
    print_table(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
