"""Rule 4: the effect ledger. At most one provider call per key unless ``failed`` came first."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import JsonValue

from ..._crashpoints import CrashPoint, SimulatedCrash, crash_hook, raise_at
from ...contracts.durability import DurabilityStore, EffectOperation, TurnScope
from ...contracts.errors import (
    EffectConflictError,
    EffectNotAppliedError,
    EffectUncertainError,
    ErrorCode,
    UsageError,
)
from ...contracts.receipts import EffectAuthority, EffectExecution, EffectIdentity, ReceiptStatus
from ._support import (
    ConformanceHarness,
    Provider,
    commit_simple,
    conformance_test,
    effect,
    make_result,
)

__all__ = ["Rule4Effects"]


async def run_once(
    store: DurabilityStore, thread_id: str, turn_id: str, key: str, operation: EffectOperation
) -> EffectExecution:
    """One turn that runs a single effect and does not commit."""

    async def body(scope: TurnScope) -> EffectExecution:
        return await scope.run_effect(effect(key), operation)

    return await store.with_turn(thread_id, turn_id, body)


class Rule4Effects:
    @conformance_test
    async def test_rule4_completed_effect_replays_without_calling(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        first = await run_once(store, "t1", "turn-1", "k1", provider.returning({"charge": "ch_1"}))
        second = await run_once(store, "t1", "turn-2", "k1", provider.returning({"charge": "ch_2"}))
        assert provider.total() == 1
        assert not first.replayed and second.replayed
        assert second.value == {"charge": "ch_1"}
        assert second.receipt == first.receipt
        assert first.receipt.status is ReceiptStatus.COMPLETED

    @conformance_test
    async def test_rule4_prepared_is_durable_before_the_call(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        observer = await harness.open()
        seen: list[ReceiptStatus | None] = []

        async def provider_call(authority: EffectAuthority) -> JsonValue:
            receipt = await observer.get_receipt("t1", authority.idempotency_key)
            seen.append(None if receipt is None else receipt.status)
            return "ok"

        await run_once(store, "t1", "turn-1", "k1", provider_call)
        assert seen == [ReceiptStatus.PREPARED]

    @conformance_test
    async def test_rule4_prepared_found_at_start_becomes_uncertain(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        with crash_hook(raise_at(CrashPoint.EFFECT_PREPARED)), pytest.raises(SimulatedCrash):
            await run_once(store, "t1", "turn-1", "k1", provider.returning("never"))
        restarted = await harness.open()
        receipt = await restarted.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.status is ReceiptStatus.PREPARED
        with pytest.raises(EffectUncertainError) as caught:
            await run_once(restarted, "t1", "turn-1", "k1", provider.returning("again"))
        assert caught.value.code == ErrorCode.EFFECT_UNCERTAIN
        assert provider.total() == 0
        receipt = await restarted.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.status is ReceiptStatus.UNCERTAIN

    @conformance_test
    async def test_rule4_uncertain_fails_closed_on_every_retry(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        with pytest.raises(EffectUncertainError):
            await run_once(store, "t1", "turn-1", "k1", provider.raising(ConnectionError("reset")))
        for attempt in range(3):
            with pytest.raises(EffectUncertainError):
                await run_once(store, "t1", f"turn-{attempt + 2}", "k1", provider.returning("x"))
        assert provider.total() == 1

    @conformance_test
    async def test_rule4_not_applied_records_failed_and_allows_a_retry(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        ids: list[str] = []

        async def declined(authority: EffectAuthority) -> JsonValue:
            ids.append(authority.receipt_id)
            raise EffectNotAppliedError("declined")

        with pytest.raises(EffectNotAppliedError):
            await run_once(store, "t1", "turn-1", "k1", declined)
        failed = await store.get_receipt("t1", "payments.charge:k1")
        assert failed is not None and failed.status is ReceiptStatus.FAILED

        async def accepted(authority: EffectAuthority) -> JsonValue:
            ids.append(authority.receipt_id)
            return "charged"

        done = await run_once(store, "t1", "turn-2", "k1", accepted)
        assert done.value == "charged" and not done.replayed
        assert ids[0] == ids[1] == done.receipt.id
        assert done.receipt.attempts == 2
        assert provider.total() == 0

    @conformance_test
    async def test_rule4_other_exceptions_become_uncertain(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        cause = ConnectionResetError("response lost after the write")
        with pytest.raises(EffectUncertainError) as caught:
            await run_once(store, "t1", "turn-1", "k1", provider.raising(cause))
        assert caught.value.__cause__ is cause
        assert not caught.value.retryable
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.status is ReceiptStatus.UNCERTAIN

    @conformance_test
    async def test_rule4_cancellation_becomes_uncertain(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        started = asyncio.Event()

        async def slow(authority: EffectAuthority) -> JsonValue:
            started.set()
            await asyncio.sleep(30)
            return "late"

        task = asyncio.create_task(run_once(store, "t1", "turn-1", "k1", slow))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.status is ReceiptStatus.UNCERTAIN

    @conformance_test
    async def test_rule4_timeout_becomes_uncertain(self, harness: ConformanceHarness) -> None:
        store = await harness.open()

        async def slow(authority: EffectAuthority) -> JsonValue:
            await asyncio.wait_for(asyncio.sleep(30), 0.01)
            return "late"

        with pytest.raises(EffectUncertainError) as caught:
            await run_once(store, "t1", "turn-1", "k1", slow)
        assert isinstance(caught.value.__cause__, TimeoutError)
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.status is ReceiptStatus.UNCERTAIN

    @conformance_test
    async def test_rule4_unstorable_value_becomes_uncertain(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        for key, value in (("nan", float("nan")), ("obj", {"when": object()})):
            with pytest.raises(EffectUncertainError) as caught:
                await run_once(store, "t1", f"turn-{key}", key, provider.returning(value))  # type: ignore[arg-type]
            assert caught.value.code == ErrorCode.EFFECT_VALUE_NOT_STORABLE
            receipt = await store.get_receipt("t1", f"payments.charge:{key}")
            assert receipt is not None and receipt.status is ReceiptStatus.UNCERTAIN
        assert provider.total() == 2

    @conformance_test
    async def test_rule4_key_collision_across_capabilities_is_refused(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        await run_once(store, "t1", "turn-1", "k1", provider.returning(1))

        async def other_capability(scope: TurnScope) -> None:
            identity = effect("k1")
            clash = EffectIdentity(identity.idempotency_key, "refunds.create")
            await scope.run_effect(clash, provider.returning(2))

        with pytest.raises(EffectConflictError) as caught:
            await store.with_turn("t1", "turn-2", other_capability)
        assert caught.value.code == ErrorCode.IDEMPOTENCY_KEY_COLLISION
        assert provider.total() == 1

    @conformance_test
    async def test_rule4_keys_dedupe_across_turns_independently_of_replay(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()

        async def effect_then_crash(scope: TurnScope) -> None:
            await scope.run_effect(effect("k1"), provider.returning("ch_1"))
            raise RuntimeError("model failed after the charge")

        with pytest.raises(RuntimeError):
            await store.with_turn("t1", "turn-1", effect_then_crash)
        _, executions, _ = await commit_simple(
            store, "t1", "turn-2", effects=[(effect("k1"), provider.returning("ch_2"))]
        )
        assert executions[0].replayed and executions[0].value == "ch_1"
        assert provider.total() == 1

    @conformance_test
    async def test_rule4_keys_are_isolated_between_threads(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        a = await run_once(store, "thread-a", "turn-1", "k1", provider.returning("a"))
        b = await run_once(store, "thread-b", "turn-1", "k1", provider.returning("b"))
        assert (a.value, b.value) == ("a", "b")
        assert provider.total() == 2
        assert a.receipt.id != b.receipt.id

    @conformance_test
    async def test_rule4_first_run_and_replay_return_equal_values(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        live = {"pair": (1, 2), "nested": {"t": ("a",)}, "f": 0.1}
        first = await run_once(store, "t1", "turn-1", "k1", provider.returning(live))  # type: ignore[arg-type]
        replay = await run_once(store, "t1", "turn-2", "k1", provider.returning(None))
        assert first.value == replay.value == {"pair": [1, 2], "nested": {"t": ["a"]}, "f": 0.1}

    @conformance_test
    async def test_rule4_nested_run_effect_is_refused(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        provider = Provider()

        async def body(scope: TurnScope) -> None:
            async def outer(authority: EffectAuthority) -> JsonValue:
                await scope.run_effect(effect("inner"), provider.returning(1))
                return "outer"

            await scope.run_effect(effect("outer"), outer)

        # A programming error, not an operator ticket: the outer receipt ends ``failed`` (its
        # operation called nothing), never ``uncertain``, and the refusal itself is raised.
        with pytest.raises(UsageError) as caught:
            await store.with_turn("t1", "turn-1", body)
        assert caught.value.code == ErrorCode.EFFECT_NESTED
        assert provider.total() == 0
        assert await store.get_receipt("t1", "payments.charge:inner") is None
        outer = await store.get_receipt("t1", "payments.charge:outer")
        assert outer is not None and outer.status is ReceiptStatus.FAILED
        assert await store.list_receipts(status=ReceiptStatus.UNCERTAIN) == []

    @conformance_test
    async def test_rule4_authority_carries_the_key_and_receipt_id(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        seen: list[EffectAuthority] = []

        async def provider_call(authority: EffectAuthority) -> JsonValue:
            seen.append(authority)
            return None

        done = await run_once(store, "t1", "turn-1", "k1", provider_call)
        assert seen[0].idempotency_key == "payments.charge:k1"
        assert seen[0].receipt_id == done.receipt.id
        assert done.receipt.turn_id == "turn-1" and done.receipt.step_id == "step-1"

    @conformance_test
    async def test_rule4_same_key_twice_at_once_in_one_turn_is_refused(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        gate = asyncio.Event()

        async def slow(authority: EffectAuthority) -> JsonValue:
            provider.calls[authority.idempotency_key] += 1
            await gate.wait()
            return "ok"

        async def body(scope: TurnScope) -> list[object]:
            first = asyncio.create_task(scope.run_effect(effect("k1"), slow))
            await asyncio.sleep(0.05)
            try:
                await scope.run_effect(effect("k1"), slow)
            except UsageError as exc:
                gate.set()
                return [await first, exc.code]
            raise AssertionError("second concurrent call must be refused")

        outcome = await store.with_turn("t1", "turn-1", body)
        assert outcome[1] == ErrorCode.EFFECT_IN_PROGRESS
        assert provider.total() == 1

    @conformance_test
    async def test_rule4_run_effect_after_commit_is_refused(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()

        async def body(scope: TurnScope) -> None:
            await scope.commit(make_result(scope))
            await scope.run_effect(effect("late"), provider.returning(1))

        with pytest.raises(UsageError) as caught:
            await store.with_turn("t1", "turn-1", body)
        assert caught.value.code == ErrorCode.SCOPE_CLOSED
        assert provider.total() == 0
