"""SQLite durability benchmark: turns/s, commits and fsyncs per turn, cost vs thread length.

Run: ``.venv/bin/python bench/sqlite_turns.py`` (``--quick`` for a smoke run). Prints a table and
writes ``bench/results/sqlite_turns.json``. Measures, in one run and on one database file in a
temporary directory (or ``--dir``):

- turns/s for a turn without effects and a turn with one effect, with 1 and 8 threads in flight
  (asyncio tasks on different thread ids, one process, one adapter instance);
- commits per turn (the adapter's counter of write transactions) and fsyncs per turn (counted
  by ``strace -f -c -e trace=fsync,fdatasync`` around a separate process running the same turns,
  minus a run with zero turns);
- mean per-turn time on a thread with 10 committed turns vs one with 10,000.

Numbers are machine-specific; compare ratios measured side by side in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from intention_kernel.contracts import (
    DurableTurnResult,
    EffectAuthority,
    EffectIdentity,
    KernelCheckpoint,
    KernelEvent,
    TurnScope,
)
from intention_kernel.durability.sqlite import SQLiteDurability

RESULTS = Path(__file__).parent / "results" / "sqlite_turns.json"


async def _provider(authority: EffectAuthority) -> Any:
    return {"charge": authority.receipt_id}


def _operation(effect: bool) -> Any:
    async def operation(scope: TurnScope) -> None:
        values = []
        if effect:
            key = f"bench.charge:{scope.thread_id}:{scope.turn_id}"
            done = await scope.run_effect(EffectIdentity(key, "bench.charge"), _provider)
            values.append(done.value)
        revision = 1 if scope.checkpoint is None else scope.checkpoint.revision + 1
        result = DurableTurnResult(
            thread_id=scope.thread_id,
            turn_id=scope.turn_id,
            trace_id=f"trace-{scope.turn_id}",
            response={"text": "ok", "values": values},
            checkpoint=KernelCheckpoint(revision=revision, agent_fingerprint="bench@1"),
        )
        event = KernelEvent(
            id=f"evt-{scope.thread_id}-{scope.turn_id}",
            type="bench.turn",
            occurred_at=datetime.now(UTC),
            thread_id=scope.thread_id,
            turn_id=scope.turn_id,
            sequence=0,
            correlation_id=result.trace_id,
        )
        await scope.commit(result, [event])

    return operation


async def _turns(
    store: SQLiteDurability, thread: str, prefix: str, count: int, effect: bool
) -> None:
    operation = _operation(effect)
    for i in range(count):
        await store.with_turn(thread, f"{prefix}-{i}", operation)


async def throughput(db: Path, *, effect: bool, concurrency: int, turns: int) -> dict[str, Any]:
    store = await SQLiteDurability.open(db)
    label = f"{'effect' if effect else 'plain'}-c{concurrency}"
    per_task = turns // concurrency
    commits_before = store.commits
    started = time.perf_counter()
    await asyncio.gather(
        *(
            _turns(store, f"{label}-thread-{n}", "turn", per_task, effect)
            for n in range(concurrency)
        )
    )
    elapsed = time.perf_counter() - started
    total = per_task * concurrency
    commits = store.commits - commits_before
    await store.close()
    return {
        "workload": "one effect" if effect else "no effect",
        "concurrency": concurrency,
        "turns": total,
        "seconds": round(elapsed, 3),
        "turns_per_s": round(total / elapsed, 1),
        "ms_per_turn": round(1000 * elapsed / total, 3),
        "commits_per_turn": round(commits / total, 2),
    }


async def length_cost(db: Path, *, short: int, long: int, sample: int) -> dict[str, Any]:
    """Turns on a short and a long thread, interleaved so WAL checkpoints hit both alike."""
    store = await SQLiteDurability.open(db)
    await _turns(store, "len-short", "fill", short, False)
    await _turns(store, "len-long", "fill", long, False)
    operation = _operation(False)
    timings: dict[int, list[float]] = {short: [], long: []}
    for i in range(sample):
        for thread, length in (("len-short", short), ("len-long", long)):
            started = time.perf_counter()
            await store.with_turn(thread, f"sample-{i}", operation)
            timings[length].append(1000 * (time.perf_counter() - started))
    await store.close()
    mean = {k: statistics.fmean(v) for k, v in timings.items()}
    median = {k: statistics.median(v) for k, v in timings.items()}
    return {
        "sample_turns": sample,
        "short": short,
        "long": long,
        "mean_ms_short": round(mean[short], 3),
        "mean_ms_long": round(mean[long], 3),
        "median_ms_short": round(median[short], 3),
        "median_ms_long": round(median[long], 3),
        "ratio_mean": round(mean[long] / mean[short], 3),
        "ratio_median": round(median[long] / median[short], 3),
    }


def _strace_fsyncs(db: Path, effect: bool, turns: int) -> int:
    log = db.with_suffix(f".strace{turns}")
    command = [
        "strace", "-f", "-c", "-o", str(log), "-e", "trace=fsync,fdatasync",
        sys.executable, __file__, "--probe", str(db), "--probe-turns", str(turns),
    ]  # fmt: skip
    if effect:
        command.append("--probe-effect")
    subprocess.run(command, check=True, capture_output=True)
    total = 0
    for line in log.read_text().splitlines():
        match = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)$", line)
        if match:
            total += int(match.group(1))
    return total


def fsyncs_per_turn(directory: Path, effect: bool, turns: int) -> float | None:
    if shutil.which("strace") is None:
        return None
    base = _strace_fsyncs(directory / f"fs-base-{effect}.db", effect, 0)
    loaded = _strace_fsyncs(directory / f"fs-load-{effect}.db", effect, turns)
    return round((loaded - base) / turns, 2)


async def _probe(db: Path, turns: int, effect: bool) -> None:
    store = await SQLiteDurability.open(db)
    await _turns(store, "probe", "turn", turns, effect)
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--dir", type=Path, help="where to put the database (default: a temp dir)")
    parser.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--probe-turns", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--probe-effect", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe is not None:
        asyncio.run(_probe(args.probe, args.probe_turns, args.probe_effect))
        return
    turns, long, sample, fsync_turns = (80, 1000, 40, 40) if args.quick else (800, 10_000, 300, 200)
    with tempfile.TemporaryDirectory(prefix="ik-bench-", dir=args.dir) as tmp:
        directory = Path(tmp)
        rows = [
            asyncio.run(throughput(directory / "bench.db", effect=e, concurrency=c, turns=turns))
            for e in (False, True)
            for c in (1, 8)
        ]
        fsyncs = {e: fsyncs_per_turn(directory, e, fsync_turns) for e in (False, True)}
        for row in rows:
            row["fsyncs_per_turn"] = fsyncs[row["workload"] == "one effect"]
        length = asyncio.run(
            length_cost(directory / "length.db", short=10, long=long, sample=sample)
        )
    report = {
        "benchmark": "sqlite_turns",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "settings": {"journal_mode": "wal", "synchronous": "FULL", "quick": args.quick},
        "fsyncs_counted_by": "strace -f -c" if shutil.which("strace") else "not measured",
        "throughput": rows,
        "thread_length": length,
    }
    print(f"{'workload':<12}{'threads':>8}{'turns':>7}{'turns/s':>10}{'ms/turn':>9}"
          f"{'commits/turn':>14}{'fsyncs/turn':>13}")  # fmt: skip
    for row in rows:
        print(
            f"{row['workload']:<12}{row['concurrency']:>8}{row['turns']:>7}"
            f"{row['turns_per_s']:>10}{row['ms_per_turn']:>9}{row['commits_per_turn']:>14}"
            f"{row['fsyncs_per_turn']!s:>13}"
        )
    print(
        f"per-turn cost, thread length {length['short']} vs {length['long']}:"
        f" mean {length['mean_ms_short']} vs {length['mean_ms_long']} ms"
        f" (ratio {length['ratio_mean']}), median {length['median_ms_short']}"
        f" vs {length['median_ms_long']} ms (ratio {length['ratio_median']})"
    )
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
