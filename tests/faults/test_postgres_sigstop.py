"""F9: a lease holder paused (SIGSTOP) past its TTL is fenced after another worker took over.

The same run with fencing switched off (``kit.unfenced``: ``PostgresTurns`` over statements
rendered without fencing) must report violations,
or the test would prove nothing.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time

from intention_kernel._crashpoints import CrashPoint
from intention_kernel.testing.conformance import effect

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
    wait_stopped,
)

TTL = 1.0


def _paused_holder_run(dsn: str, schema: str, *, planted: bool) -> Report:
    name = "sigstop" + (" (planted bug: no fencing)" if planted else "")
    log = os.path.join(tempfile.mkdtemp(prefix="ik-stop-"), "log.jsonl")
    planned: list[TurnSpec] = []
    with ProviderProcess(dsn, schema) as provider, reporting(Report(name)) as report:
        for rep in range(2 * fault_scale()):
            thread = f"stop-{rep}"
            stale_turn = TurnSpec(thread, "turn-a", ("ka",))
            taker_turn = TurnSpec(thread, "turn-b", ("kb",))
            planned += [taker_turn]

            def spec(turn: TurnSpec, point: CrashPoint | None = None) -> WorkerSpec:
                return WorkerSpec(
                    dsn,
                    schema,
                    provider.socket,
                    [turn],
                    log,
                    crash_point=point,
                    crash_signal=signal.SIGSTOP,
                    lease_ttl=TTL,
                    unfenced=planted,
                )

            stale = start_worker(spec(stale_turn, CrashPoint.CHECKPOINT_LOADED))
            assert stale.pid is not None
            if not wait_stopped(stale.pid):
                stale.kill()
                report.add("I9", "holder never reached the pause point")
                continue
            report.runs += 1
            report.injections["sigstop"] += 1
            time.sleep(TTL + 0.5)
            taker = start_worker(spec(taker_turn))
            taker.join(30)
            os.kill(stale.pid, signal.SIGCONT)
            stale.join(30)
            records = {
                r["turn"]: r for r in read_log(log) if "outcome" in r and r["thread"] == thread
            }
            a, b = records.get("turn-a"), records.get("turn-b")
            if b is None or b["outcome"] != "committed":
                report.add("I9", f"{thread}: taker did not commit: {b}")
            report.figures["stale_writes_attempted"] = report.figures.get(
                "stale_writes_attempted", 0
            ) + (a is not None)
            if a is None or not a.get("lease_lost"):
                report.add("I2", f"{thread}: stale holder not fenced, ended with {a}")
            else:
                report.figures["stale_writes_rejected"] = (
                    report.figures.get("stale_writes_rejected", 0) + 1
                )
            calls = provider.stats()["calls"]
            key = effect("ka").idempotency_key
            if calls.get(f"{thread}\t{key}"):
                report.add("I2", f"{thread}: stale holder called the provider")
            receipt_written = asyncio.run(_receipt_status(dsn, schema, thread, key))
            if receipt_written is not None:
                report.add("I2", f"{thread}: stale holder wrote a {receipt_written} receipt")
        outcomes = [r for r in read_log(log) if "outcome" in r]
        asyncio.run(
            check_invariants(report, dsn, schema, provider.stats(), outcomes, planned=planned)
        )
    return report


async def _receipt_status(dsn: str, schema: str, thread: str, key: str) -> str | None:
    import asyncpg

    conn = await asyncpg.connect(dsn, statement_cache_size=0)
    try:
        status: str | None = await conn.fetchval(
            f'SELECT status FROM "{schema}".receipts WHERE thread_id = $1 AND idempotency_key = $2',
            thread,
            key,
        )
        return status
    finally:
        await conn.close()


def test_paused_holder_is_fenced(dsn: str, schema: str) -> None:
    report = _paused_holder_run(dsn, schema, planted=False)
    assert report.total == 0
    assert report.runs >= 2


def test_planted_bug_without_fencing_is_detected(dsn: str, schema: str) -> None:
    report = _paused_holder_run(dsn, schema, planted=True)
    assert len(report.violations["I2"]) >= report.runs >= 2
