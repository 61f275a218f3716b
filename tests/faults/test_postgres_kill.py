"""F1/F22: ``kill -9`` of a worker at every crash point, redelivery, operator resolution.

Long run: ``IK_FAULT_SCALE=10 .venv/bin/pytest tests/faults -s``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile

from intention_kernel._crashpoints import CrashPoint
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.testing.conformance import effect

from . import kit
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

# Outcome of the redelivery after a kill at each point (RELIABILITY.md b.2), and the
# provider calls the key has seen by then.
EXPECTED: dict[CrashPoint, tuple[str, int]] = {
    CrashPoint.LEASE_ACQUIRED: ("committed", 1),
    CrashPoint.CHECKPOINT_LOADED: ("committed", 1),
    CrashPoint.EFFECT_PREPARED: ("EFFECT_UNCERTAIN", 0),
    CrashPoint.EFFECT_IN_FLIGHT: ("EFFECT_UNCERTAIN", 0),
    CrashPoint.EFFECT_RETURNED: ("EFFECT_UNCERTAIN", 1),
    CrashPoint.RECEIPT_RECORDED: ("committed", 1),
    CrashPoint.INSIDE_COMMIT: ("committed", 1),
    CrashPoint.AFTER_COMMIT: ("replayed", 1),
}


def _outcome(record: dict[str, object]) -> str:
    return str(record["code"]) if record["outcome"] == "error" else str(record["outcome"])


def test_kill_9_at_every_crash_point(dsn: str, schema: str) -> None:
    reps = 3 * fault_scale()
    log = os.path.join(tempfile.mkdtemp(prefix="ik-kill-"), "log.jsonl")
    planned: list[TurnSpec] = []
    with ProviderProcess(dsn, schema) as provider, reporting(Report("kill-9")) as report:

        def spec(turns: list[TurnSpec], point: CrashPoint | None = None) -> WorkerSpec:
            return WorkerSpec(
                dsn, schema, provider.socket, turns, log, crash_point=point, lease_ttl=1.0
            )

        def run(specs: list[WorkerSpec]) -> list[int | None]:
            processes = [start_worker(s) for s in specs]
            for p in processes:
                p.join(60)
            return [p.exitcode for p in processes]

        for rep in range(reps):
            turns = {p: TurnSpec(f"kill-{p}-{rep}", "turn-1", ("k",)) for p in EXPECTED}
            planned += turns.values()
            codes = run([spec([turns[p]], p) for p in EXPECTED])
            report.runs += len(codes)
            for point, code in zip(EXPECTED, codes, strict=True):
                report.injections[f"kill@{point}"] += 1
                if code != -signal.SIGKILL:
                    report.add("I8", f"worker at {point} exited with {code}, not SIGKILL")
            before = len(read_log(log))
            run([spec([turns[p]]) for p in EXPECTED])
            answers = {(r["thread"]): r for r in read_log(log)[before:] if "outcome" in r}
            calls = provider.stats()["calls"]
            for point, (expected, expected_calls) in EXPECTED.items():
                t = turns[point]
                got = answers.get(t.thread_id)
                if got is None or _outcome(got) != expected:
                    report.add("I9", f"{point}: redelivery gave {got}, expected {expected}")
                key = f"{t.thread_id}\t{effect('k').idempotency_key}"
                if calls.get(key, 0) != expected_calls:
                    report.add("I5b", f"{point}: {calls.get(key, 0)} calls, not {expected_calls}")
            # The operator resolves what is uncertain; the retry then finishes the turn.
            asyncio.run(_resolve(dsn, schema, turns, report))
            before = len(read_log(log))
            run([spec([turns[p]]) for p in EXPECTED])
            for r in read_log(log)[before:]:
                if "outcome" in r and r["outcome"] not in ("committed", "replayed"):
                    report.add("I9", f"after resolution {r['thread']}: {r}")
        outcomes = [r for r in read_log(log) if "outcome" in r]
        asyncio.run(
            check_invariants(report, dsn, schema, provider.stats(), outcomes, planned=planned)
        )
        report.figures["turns_planned"] = len(planned)
    assert report.total == 0


async def _resolve(
    dsn: str, schema: str, turns: dict[CrashPoint, TurnSpec], report: Report
) -> None:
    store = await PostgresDurability.open(dsn, schema=schema, max_size=1, **kit.WORKER_OPTIONS)
    try:
        key = effect("k").idempotency_key
        for point, turn in turns.items():
            receipt = await store.get_receipt(turn.thread_id, key)
            if receipt is None or receipt.status != "uncertain":
                continue
            # The provider log says whether the call happened; an operator would ask it.
            if point is CrashPoint.EFFECT_RETURNED:
                await store.reconcile(
                    turn.thread_id, key, "completed", value="charged:ops", note="seen", actor="op"
                )
            else:
                await store.reconcile(
                    turn.thread_id, key, "not_applied", note="no call", actor="op"
                )
            report.injections["reconciled"] += 1
    finally:
        await store.close()
