"""``kill -9`` at every crash point, several times each, with the provider in its own process.

Each scenario runs one turn with one effect in a worker that SIGKILLs itself at the point, then
redelivers the same turn in a fresh worker, resolves an ``uncertain`` receipt as an operator
would and delivers once more. After every step the database and the provider's call counts are
checked against RELIABILITY.md: I1 (one commit, replay), I4 (turn row, head and outbox all or
nothing), I5 (``prepared`` durable before the call, at most one call per key unless a ``failed``
receipt came first, interrupted calls end ``uncertain`` and are reported without calling,
completed effects replay). ``IK_FAULT_SCALE=20`` runs the long campaign.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from intention_kernel._crashpoints import CrashPoint
from intention_kernel.durability.sqlite import SQLiteDurability

from .fault_support import (
    SCALE,
    ProviderProcess,
    inspect,
    integrity_ok,
    provider_process,
    run_worker,
    worker_env,
)


@dataclass(frozen=True)
class Expect:
    calls: int
    """Provider calls once the crashed attempt is dead."""
    receipt: str | None
    committed: bool
    redelivery: str
    resolve: str | None = None
    """How an operator resolves the ``uncertain`` receipt the redelivery reports."""


EXPECT = {
    CrashPoint.LEASE_ACQUIRED: Expect(0, None, False, "committed"),
    CrashPoint.CHECKPOINT_LOADED: Expect(0, None, False, "committed"),
    CrashPoint.EFFECT_PREPARED: Expect(0, "prepared", False, "uncertain", "not_applied"),
    CrashPoint.EFFECT_IN_FLIGHT: Expect(0, "prepared", False, "uncertain", "not_applied"),
    CrashPoint.EFFECT_RETURNED: Expect(1, "prepared", False, "uncertain", "completed"),
    CrashPoint.RECEIPT_RECORDED: Expect(1, "completed", False, "committed"),
    CrashPoint.INSIDE_COMMIT: Expect(1, "completed", False, "committed"),
    CrashPoint.AFTER_COMMIT: Expect(1, "completed", True, "replayed"),
}


@dataclass
class Report:
    scenarios: int = 0
    injections: int = 0
    violations: list[str] = field(default_factory=list)


class Scenario:
    def __init__(
        self, db: Path, provider: ProviderProcess, point: CrashPoint, n: int, env: dict[str, str]
    ) -> None:
        self.db, self.provider, self.point, self.env = db, provider, point, env
        self.thread = f"{point}-{n}"
        self.key = f"test.call:{self.thread}"
        self.failed_receipts = 0
        self.violations: list[str] = []
        self.injected = False

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.violations.append(f"{self.thread}: {what}")

    def attempt(self, crash: CrashPoint | None) -> tuple[int, int, dict[str, object] | None]:
        spec: dict[str, object] = {
            "db": str(self.db),
            "thread": self.thread,
            "turn": "turn-1",
            "key": self.key,
            "provider": self.provider.url,
        }
        if crash is not None:
            spec["crash"] = str(crash)
        done = run_worker(spec, self.env)
        line = done.lines[0] if done.lines else None
        return done.returncode, len(done.lines), line

    def calls(self) -> int:
        return self.provider.calls(self.thread, self.key)

    def check_state(self, step: str, committed: bool | None = None) -> None:
        state = inspect(self.db, self.thread)
        present = state.turns == ["turn-1"]
        whole = present and state.head == (1, "turn-1") and state.outbox == 1
        nothing = not state.turns and state.head is None and state.outbox == 0
        self.check(whole or nothing, f"I4 half-committed turn after {step}: {state}")
        if committed is not None:
            self.check(present == committed, f"I1 committed={present} after {step}")
        self.check(
            self.calls() <= 1 + self.failed_receipts,
            f"I5b {self.calls()} provider calls with {self.failed_receipts} failed receipts",
        )

    def run(self) -> None:
        expect = EXPECT[self.point]
        returncode, _, _ = self.attempt(self.point)
        self.injected = returncode == -9
        self.check(self.injected, f"crash point not reached (exit {returncode})")
        receipt = inspect(self.db, self.thread).receipts.get(self.key)
        self.check(self.calls() == expect.calls, f"{self.calls()} calls after the crash")
        self.check(receipt == expect.receipt, f"receipt {receipt} after the crash")
        self.check_state("the crash", expect.committed)

        returncode, _, line = self.attempt(None)
        outcome = None if line is None else line["outcome"]
        self.check(returncode == 0 and outcome == expect.redelivery, f"redelivery {outcome}")
        self.check_state("the redelivery", expect.redelivery != "uncertain")
        if expect.redelivery != "uncertain":
            values = None if line is None else line["response"]["values"]  # type: ignore[index]
            self.check(values == [f"{self.key}#1"], f"I5d value {values} is not the first call's")
            self.check(self.calls() == 1, f"{self.calls()} calls after the redelivery")
            return
        self.check(self.calls() == expect.calls, "I5c the redelivery called the provider")
        receipt = inspect(self.db, self.thread).receipts.get(self.key)
        self.check(receipt == "uncertain", f"I5c receipt {receipt} after the redelivery")

        resolve = {"db": str(self.db), "thread": self.thread, "key": self.key}
        if expect.resolve == "completed":
            resolve |= {"outcome": "completed", "value": f"{self.key}#1"}
        else:
            resolve |= {"outcome": "not_applied"}
            self.failed_receipts += 1
        run_worker({"mode": "reconcile", **resolve}, self.env)
        returncode, _, line = self.attempt(None)
        outcome = None if line is None else line["outcome"]
        self.check(returncode == 0 and outcome == "committed", f"after resolution {outcome}")
        self.check_state("the resolution", True)
        self.check(self.calls() == 1, f"{self.calls()} calls after the resolution")


def run_campaign(
    db: Path, points: list[CrashPoint], rounds: int, env: dict[str, str]
) -> tuple[Report, list[str]]:
    report = Report()

    async def create() -> None:
        await (await SQLiteDurability.open(db)).close()

    asyncio.run(create())
    with provider_process() as provider:
        scenarios = [Scenario(db, provider, p, n, env) for n in range(rounds) for p in points]
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(Scenario.run, scenarios))
        unprepared = provider.stats()["unprepared"]
    report.scenarios = len(scenarios)
    report.injections = sum(s.injected for s in scenarios)
    report.violations = [v for s in scenarios for v in s.violations]
    report.violations += [
        f"I5a provider called without a prepared receipt: {u}" for u in unprepared
    ]
    if not integrity_ok(db):
        report.violations.append("I8 PRAGMA integrity_check failed")
    return report, unprepared


def test_kill_9_at_every_crash_point_keeps_the_invariants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rounds = 2 * SCALE
    report, _ = run_campaign(tmp_path / "campaign.db", list(CrashPoint), rounds, worker_env())
    with capsys.disabled():
        print(
            f"\nsqlite crash campaign: scale={SCALE} points={len(CrashPoint)} rounds={rounds}"
            f" scenarios={report.scenarios} injections={report.injections}"
            f" violations={len(report.violations)}"
        )
    assert report.injections == report.scenarios == len(CrashPoint) * rounds
    assert report.violations == []


def test_the_campaign_catches_a_planted_prepare_after_call_bug(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    points = [CrashPoint.EFFECT_PREPARED, CrashPoint.EFFECT_RETURNED]
    env = worker_env(IK_PLANTED_BUG="prepare_after_call")
    report, unprepared = run_campaign(tmp_path / "planted.db", points, 1, env)
    with capsys.disabled():
        print(
            f"\nsqlite crash campaign with planted bug prepare_after_call:"
            f" injections={report.injections} violations={len(report.violations)}"
        )
    assert len(report.violations) > 0
    assert unprepared, "the provider must see calls without a prepared receipt"
    assert any("I5b" in v for v in report.violations), "and a second call for one key"
