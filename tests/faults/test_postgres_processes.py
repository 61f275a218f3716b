"""F7/F8: many processes on one turn and on one thread; different threads in parallel."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from typing import Any

from .kit import (
    ProviderProcess,
    Report,
    TurnSpec,
    WorkerSpec,
    check_invariants,
    fault_scale,
    read_log,
    reporting,
    start_worker,
)


def _run_all(specs: list[WorkerSpec]) -> None:
    processes = [start_worker(s) for s in specs]
    for p in processes:
        p.join(120)
        assert p.exitcode == 0


def _overlaps(log: list[dict[str, Any]], thread: str) -> int:
    """Largest number of handlers of ``thread`` running at once (occupancy probe)."""
    marks = sorted(
        (r.get("enter", r.get("exit")), 1 if "enter" in r else -1)
        for r in log
        if r.get("thread") == thread and ("enter" in r or "exit" in r)
    )
    inside = most = 0
    for _, step in sorted(marks, key=lambda m: (m[0], m[1])):
        inside += step
        most = max(most, inside)
    return most


def test_same_turn_from_8_processes_runs_once(dsn: str, schema: str) -> None:
    log = os.path.join(tempfile.mkdtemp(prefix="ik-same-"), "log.jsonl")
    turn = TurnSpec("same", "turn-1", ("k",))
    with ProviderProcess(dsn, schema) as provider, reporting(Report("same-turn-x8")) as report:
        for rep in range(fault_scale()):
            t = TurnSpec(f"same-{rep}", "turn-1", turn.keys)
            _run_all(
                [
                    WorkerSpec(dsn, schema, provider.socket, [t], log, hold_in_turn=0.2)
                    for _ in range(8)
                ]
            )
            report.runs += 8
        entries = read_log(log)
        outcomes = [r for r in entries if "outcome" in r]
        for rep in range(fault_scale()):
            mine = [o for o in outcomes if o["thread"] == f"same-{rep}"]
            executed = sum(1 for r in entries if "enter" in r and r["thread"] == f"same-{rep}")
            if executed != 1:
                report.add("I1", f"same-{rep}: handler executed {executed} times")
            if len({str(o.get("response")) for o in mine}) != 1 or len(mine) != 8:
                report.add("I1", f"same-{rep}: answers differ: {mine}")
        report.figures["answers"] = sorted({o["outcome"] for o in outcomes})
        planned = [TurnSpec(f"same-{r}", "turn-1", ("k",)) for r in range(fault_scale())]
        asyncio.run(
            check_invariants(report, dsn, schema, provider.stats(), outcomes, planned=planned)
        )
    assert report.total == 0


def test_one_thread_hammered_by_4_processes(dsn: str, schema: str) -> None:
    log = os.path.join(tempfile.mkdtemp(prefix="ik-hammer-"), "log.jsonl")
    per_worker = 25 * fault_scale()
    with ProviderProcess(dsn, schema) as provider, reporting(Report("hammer-x4")) as report:
        specs = [
            WorkerSpec(
                dsn,
                schema,
                provider.socket,
                [
                    TurnSpec("hot", f"w{w}-turn-{i}", (f"w{w}-k{i}",) if i % 2 else (), retries=3)
                    for i in range(per_worker)
                ],
                log,
            )
            for w in range(4)
        ]
        started = time.monotonic()
        _run_all(specs)
        report.figures["seconds"] = round(time.monotonic() - started, 2)
        entries = read_log(log)
        outcomes = [r for r in entries if "outcome" in r]
        report.runs = len(outcomes)
        most = _overlaps(entries, "hot")
        report.figures["max_concurrent_handlers"] = most
        if most != 1:
            report.add("I2", f"{most} handlers of one thread ran at once")
        committed = {(o["thread"], o["turn"]) for o in outcomes if o["outcome"] == "committed"}
        if len(committed) != 4 * per_worker:
            failed = [o for o in outcomes if o["outcome"] != "committed"]
            report.add("I9", f"{len(committed)} of {4 * per_worker} turns committed: {failed[:3]}")
        planned = [t for s in specs for t in s.turns]
        asyncio.run(
            check_invariants(report, dsn, schema, provider.stats(), outcomes, planned=planned)
        )
    assert report.total == 0


def test_different_threads_run_in_parallel(dsn: str, schema: str) -> None:
    log = os.path.join(tempfile.mkdtemp(prefix="ik-parallel-"), "log.jsonl")
    hold = 1.0
    with ProviderProcess(dsn, schema) as provider, reporting(Report("parallel")) as report:
        specs = [
            WorkerSpec(
                dsn, schema, provider.socket, [TurnSpec(f"p{w}", "turn-1")], log, hold_in_turn=hold
            )
            for w in range(4)
        ]
        _run_all(specs)
        entries = read_log(log)
        enters = [r["enter"] for r in entries if "enter" in r]
        exits = [r["exit"] for r in entries if "exit" in r]
        # All four handlers were inside at the same moment: nothing serialized them.
        overlap = min(exits) - max(enters)
        report.figures["overlap_seconds"] = round(overlap, 2)
        if overlap <= 0:
            report.add("I2", "threads were serialized against each other")
    assert report.total == 0
