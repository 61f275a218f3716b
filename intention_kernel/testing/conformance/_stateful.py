"""Random programs of turns, effects, failures, crashes, restarts and reconciliations,
checked step by step against a small reference model of the contract (hypothesis)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from ..._crashpoints import CrashPoint, SimulatedCrash, crash_hook, raise_at
from ...contracts.durability import DurabilityStore, EffectOperation, TurnScope
from ...contracts.errors import EffectConflictError, EffectNotAppliedError, EffectUncertainError
from ...contracts.ids import new_id
from ...contracts.receipts import EffectAuthority, ReceiptStatus, ReconcileOutcome
from ._support import ConformanceHarness, effect, make_result

__all__ = ["Stateful"]

BEHAVIOURS = ("ok", "not_applied", "error", "crash_prepared")
KEYS = ("k0", "k1", "k2")
_RECONCILABLE = (ReceiptStatus.UNCERTAIN, ReceiptStatus.PREPARED)


@dataclass
class ThreadModel:
    committed: dict[str, Any] = field(default_factory=dict)
    receipts: dict[str, tuple[ReceiptStatus, Any]] = field(default_factory=dict)


class _Abort(Exception):
    pass


def build_machine(harness: ConformanceHarness) -> type[RuleBasedStateMachine]:
    class DurabilityMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.prefix = new_id("sm")
            self.store: DurabilityStore = self.run(harness.open())
            self.model: dict[str, ThreadModel] = {}
            self.calls: Counter[tuple[str, str]] = Counter()
            self.expected_calls: Counter[tuple[str, str]] = Counter()

        def run(self, coro: Any) -> Any:
            return self.loop.run_until_complete(coro)

        def thread(self, n: int) -> str:
            return f"{self.prefix}-t{n}"

        @rule(
            n=st.integers(0, 1),
            turn=st.sampled_from(["u0", "u1", "u2", "u3"]),
            plan=st.lists(
                st.tuples(st.sampled_from(KEYS), st.sampled_from(BEHAVIOURS)), max_size=3
            ),
            commit=st.booleans(),
        )
        def run_turn(self, n: int, turn: str, plan: list[tuple[str, str]], commit: bool) -> None:
            thread_id = self.thread(n)
            model = self.model.setdefault(thread_id, ThreadModel())
            seen_values: list[Any] = []

            async def provider(authority: EffectAuthority, behaviour: str) -> Any:
                key = authority.idempotency_key
                self.calls[(thread_id, key)] += 1
                if behaviour == "not_applied":
                    raise EffectNotAppliedError("declined")
                if behaviour == "error":
                    raise ConnectionError("lost")
                return f"{key}#{self.calls[(thread_id, key)]}"

            def make_op(behaviour: str) -> EffectOperation:
                return lambda authority: provider(authority, behaviour)

            async def operation(scope: TurnScope) -> str:
                if scope.prior_result is not None:
                    assert turn in model.committed, "replayed a turn the model never committed"
                    assert scope.prior_result.response == model.committed[turn]
                    return "replayed"
                assert turn not in model.committed, "a committed turn ran again"
                for key, behaviour in plan:
                    full = f"payments.charge:{key}"
                    status = model.receipts.get(full, (None, None))[0]
                    expect_call = (
                        status in (None, ReceiptStatus.FAILED) and behaviour != "crash_prepared"
                    )
                    if expect_call:
                        self.expected_calls[(thread_id, full)] += 1
                    try:
                        if behaviour == "crash_prepared" and status in (None, ReceiptStatus.FAILED):
                            with crash_hook(raise_at(CrashPoint.EFFECT_PREPARED)):
                                await scope.run_effect(effect(key), make_op(behaviour))
                            raise AssertionError("crash point not reached")
                        done = await scope.run_effect(effect(key), make_op(behaviour))
                    except SimulatedCrash:
                        model.receipts[full] = (ReceiptStatus.PREPARED, None)
                        raise _Abort() from None
                    except EffectNotAppliedError:
                        assert expect_call and behaviour == "not_applied"
                        model.receipts[full] = (ReceiptStatus.FAILED, None)
                        raise _Abort() from None
                    except EffectUncertainError:
                        if expect_call:
                            assert behaviour == "error"
                        else:
                            assert status in (ReceiptStatus.PREPARED, ReceiptStatus.UNCERTAIN)
                        model.receipts[full] = (ReceiptStatus.UNCERTAIN, None)
                        raise _Abort() from None
                    if status is ReceiptStatus.COMPLETED:
                        assert done.replayed and done.value == model.receipts[full][1]
                    else:
                        assert expect_call and not done.replayed
                        model.receipts[full] = (ReceiptStatus.COMPLETED, done.value)
                    seen_values.append(done.value)
                if not commit:
                    raise _Abort()
                result = make_result(scope, {"values": seen_values})
                await scope.commit(result)
                model.committed[turn] = result.response
                return "committed"

            with contextlib.suppress(_Abort, SimulatedCrash):
                self.run(self.store.with_turn(thread_id, turn, operation))

        @rule(n=st.integers(0, 1), key=st.sampled_from(KEYS), completed=st.booleans())
        def reconcile(self, n: int, key: str, completed: bool) -> None:
            thread_id = self.thread(n)
            model = self.model.setdefault(thread_id, ThreadModel())
            full = f"payments.charge:{key}"
            status = model.receipts.get(full, (None, None))[0]
            outcome: ReconcileOutcome = "completed" if completed else "not_applied"
            value = "reconciled" if completed else None
            try:
                self.run(
                    self.store.reconcile(
                        thread_id, full, outcome, value=value, note="n", actor="op"
                    )
                )
            except EffectConflictError:
                assert status not in _RECONCILABLE
                return
            # Turns run one at a time here, so a prepared receipt is always interrupted.
            assert status in _RECONCILABLE
            model.receipts[full] = (
                (ReceiptStatus.COMPLETED, value) if completed else (ReceiptStatus.FAILED, None)
            )

        @rule()
        def restart(self) -> None:
            self.store = self.run(harness.open())

        @invariant()
        def provider_called_exactly_as_the_model_allows(self) -> None:
            assert self.calls == self.expected_calls

        @invariant()
        def ledger_matches_the_model(self) -> None:
            for thread_id, model in self.model.items():
                for key, (status, value) in model.receipts.items():
                    receipt = self.run(self.store.get_receipt(thread_id, key))
                    assert receipt is not None and receipt.status is status
                    if status is ReceiptStatus.COMPLETED:
                        assert receipt.value == value
                checkpoint = self.run(self.store.load_checkpoint(thread_id))
                revision = 0 if checkpoint is None else checkpoint.revision
                assert revision == len(model.committed)

        def teardown(self) -> None:
            self.loop.close()

    return DurabilityMachine


class Stateful:
    def test_stateful_random_programs_match_the_reference_model(
        self, harness: ConformanceHarness
    ) -> None:
        machine = build_machine(harness)
        try:
            run_state_machine_as_test(
                machine,
                settings=settings(
                    max_examples=harness.stateful_examples,
                    stateful_step_count=25,
                    deadline=None,
                    database=None,
                ),
            )
        finally:
            asyncio.run(harness.close_all())
