"""Poison records: effects, reconciliations and corrupt stored rows (items 3, 6, 7 and 8):
a request or a row the store cannot use is refused or isolated, never a bricked thread."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import JsonValue

from ...contracts.durability import TurnScope
from ...contracts.errors import (
    CheckpointCorruptError,
    EffectConflictError,
    EffectUncertainError,
    ErrorCode,
    InvalidInputError,
    SerializationError,
)
from ...contracts.receipts import EffectAuthority, ReceiptStatus
from ._poison_values import HUGE, full
from ._support import (
    ConformanceHarness,
    Provider,
    commit_simple,
    conformance_test,
    effect,
    make_result,
)

__all__ = ["PoisonRecords"]


class PoisonRecords:
    """Effect requests, reconciliations and unreadable stored rows."""

    # ------------------------------------------------------------ effects (items 6 and 7)

    @conformance_test
    async def test_poison_same_key_with_another_request_is_refused_without_a_call(
        self, harness: ConformanceHarness
    ) -> None:
        """B5: a charge of 5 then a charge of 500 under one key must not replay the 5."""
        store = await full(harness)
        provider = Provider()

        async def charge(turn_id: str, amount: int) -> JsonValue:
            async def body(scope: TurnScope) -> JsonValue:
                done = await scope.run_effect(
                    effect("k1"),
                    provider.returning(f"charged {amount}"),
                    request={"amount": amount},
                )
                await scope.commit(make_result(scope))
                return done.value

            return await store.with_turn("t1", turn_id, body)

        assert await charge("turn-1", 5) == "charged 5"
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.request_fingerprint is not None
        with pytest.raises(EffectConflictError) as caught:
            await charge("turn-2", 500)
        assert caught.value.code == ErrorCode.EFFECT_REQUEST_MISMATCH
        assert caught.value.context["stored_fingerprint"] == receipt.request_fingerprint
        assert provider.total() == 1
        assert await charge("turn-3", 5) == "charged 5"  # the same request replays
        assert provider.total() == 1

    @conformance_test
    async def test_poison_receipts_without_a_fingerprint_keep_replaying(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        await commit_simple(store, "t1", "turn-1", effects=[(effect("k1"), provider.returning(1))])

        async def body(scope: TurnScope) -> JsonValue:
            done = await scope.run_effect(effect("k1"), provider.returning(2), request={"a": 1})
            return done.value

        assert await store.with_turn("t1", "turn-2", body) == 1
        assert provider.total() == 1

    @conformance_test
    async def test_poison_a_request_that_is_not_json_is_refused_before_prepared(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        for bad in [{"amount": {1, 2}}, {"amount": HUGE}, {"n": float("nan")}]:

            async def body(scope: TurnScope, request: Any = bad) -> None:
                await scope.run_effect(effect("k1"), provider.returning(1), request=request)

            with pytest.raises(SerializationError):
                await store.with_turn("t1", "turn-1", body)
        assert provider.total() == 0
        assert await store.get_receipt("t1", "payments.charge:k1") is None

    @conformance_test
    async def test_poison_a_synchronous_provider_is_called_once_and_its_value_kept(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        calls: list[str] = []

        def charge(authority: EffectAuthority) -> JsonValue:
            calls.append(authority.idempotency_key)
            return {"charge": "ch_1"}

        async def body(scope: TurnScope) -> JsonValue:
            done = await scope.run_effect(effect("k1"), charge)
            await scope.commit(make_result(scope))
            return done.value

        assert await store.with_turn("t1", "turn-1", body) == {"charge": "ch_1"}
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.status is ReceiptStatus.COMPLETED
        assert receipt.value == {"charge": "ch_1"} and calls == ["payments.charge:k1"]

    # ------------------------------------------------------------ reconciliation (item 8)

    @conformance_test
    async def test_poison_a_completed_reconciliation_needs_an_explicit_value(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        for key in ("k1", "k2"):
            with pytest.raises(EffectUncertainError):
                await commit_simple(
                    store,
                    "t1",
                    f"turn-{key}",
                    effects=[(effect(key), provider.raising(TimeoutError("gateway")))],
                )
        with pytest.raises(InvalidInputError) as caught:
            await store.reconcile("t1", "payments.charge:k1", "completed", note="n", actor="ops")
        assert caught.value.context == {"field": "value"}
        assert await store.reconciliations() == []
        receipt = await store.reconcile(
            "t1", "payments.charge:k1", "completed", value=None, note="null, on purpose", actor="a"
        )
        assert receipt.status is ReceiptStatus.COMPLETED and receipt.value is None
        failed = await store.reconcile(
            "t1", "payments.charge:k2", "not_applied", note="n", actor="a"
        )
        assert failed.status is ReceiptStatus.FAILED

    @conformance_test
    async def test_poison_a_reconciliation_can_be_corrected_with_its_audit_trail(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        key = "payments.charge:k1"
        with pytest.raises(EffectUncertainError):
            await commit_simple(
                store,
                "t1",
                "turn-1",
                effects=[(effect("k1"), provider.raising(TimeoutError("gateway")))],
            )
        await store.reconcile("t1", key, "completed", value=None, note="typo", actor="ops")
        fixed = await store.reconcile(
            "t1", key, "completed", value={"charge": "ch_9"}, note="fix", actor="ops2", correct=True
        )
        assert fixed.status is ReceiptStatus.COMPLETED and fixed.value == {"charge": "ch_9"}
        first, second = await store.reconciliations(idempotency_key=key)
        assert (first.value, first.supersedes) == (None, None)
        assert (second.value, second.supersedes, second.actor) == (
            {"charge": "ch_9"},
            first.id,
            "ops2",
        )
        assert second.previous_status is ReceiptStatus.COMPLETED
        # Without ``correct`` a reconciled receipt is still refused.
        with pytest.raises(EffectConflictError) as refused:
            await store.reconcile("t1", key, "completed", value=3, note="n", actor="a")
        assert refused.value.code == ErrorCode.RECEIPT_NOT_UNCERTAIN
        # It can be corrected again, to not_applied: then a retry may run once.
        again = await store.reconcile(
            "t1", key, "not_applied", note="refunded", actor="ops", correct=True
        )
        assert again.status is ReceiptStatus.FAILED
        _, executions, _ = await commit_simple(
            store, "t1", "turn-2", effects=[(effect("k1"), provider.returning("ch_10"))]
        )
        assert executions[0].value == "ch_10" and provider.total() == 2
        # Now completed by the provider, not by a reconciliation: not correctable.
        with pytest.raises(EffectConflictError) as late:
            await store.reconcile(
                "t1", key, "completed", value=1, note="n", actor="a", correct=True
            )
        assert late.value.code == ErrorCode.RECEIPT_NOT_RECONCILED
        assert len(await store.reconciliations(idempotency_key=key)) == 3

    @conformance_test
    async def test_poison_a_receipt_never_reconciled_cannot_be_corrected(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        await commit_simple(store, "t1", "turn-1", effects=[(effect("k1"), provider.returning(1))])
        for key in ("payments.charge:k1", "payments.charge:none"):
            with pytest.raises(EffectConflictError):
                await store.reconcile(
                    "t1", key, "completed", value=2, note="n", actor="a", correct=True
                )
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.value == 1
        assert await store.reconciliations() == []

    # ------------------------------------------------------------ corrupt rows (item 3)

    @conformance_test
    async def test_poison_a_corrupt_head_is_listed_on_its_own_thread(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        for thread in ("t1", "t2", "t3"):
            await commit_simple(store, thread, "turn-1")
        await harness.corrupt_turn("t1", "turn-1", '{"thread_id": "t1", "checkpoint": {"rev')
        await harness.corrupt_turn("t3", "turn-1", '{"n": ' + "1" * 5000 + "}")
        threads = {t.thread_id: t for t in await store.list_threads()}
        assert sorted(threads) == ["t1", "t2", "t3"]
        assert threads["t1"].corrupt is not None and threads["t1"].fingerprint is None
        assert threads["t2"].corrupt is None and threads["t2"].fingerprint == "agent-fp"
        assert threads["t3"].corrupt is not None
        assert (await store.store_status()).corrupt_threads == 2
        with pytest.raises(CheckpointCorruptError):
            await store.load_checkpoint("t1")
        assert (await store.load_checkpoint("t2")) is not None
        await commit_simple(store, "t2", "turn-2")  # other threads carry on

    @conformance_test
    async def test_poison_a_corrupt_receipt_does_not_hide_the_others(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        for thread in ("t1", "t2"):
            with pytest.raises(EffectUncertainError):
                await commit_simple(
                    store,
                    thread,
                    "turn-1",
                    effects=[(effect("k1"), provider.raising(TimeoutError("gateway")))],
                )
        await harness.corrupt_receipt("t1", "payments.charge:k1", "{not json")
        listed = await store.list_receipts(status=ReceiptStatus.UNCERTAIN)
        assert [(r.thread_id, r.error is not None) for r in listed] == [
            ("t1", True),
            ("t2", True),
        ]
        broken = next(r for r in listed if r.thread_id == "t1")
        assert broken.error is not None and broken.error.startswith("unreadable")
        assert len(await store.list_receipts()) == 2
        with pytest.raises(CheckpointCorruptError):
            await store.get_receipt("t1", "payments.charge:k1")
        assert (await store.store_status()).threads == 2

    @conformance_test
    async def test_poison_an_unreadable_outbox_row_is_dead_lettered_on_its_thread_only(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        for thread in ("t1", "t2"):
            await commit_simple(store, thread, "turn-1")  # three events each
        first = min(e.position for e in await store.read_outbox(thread_id="t1"))
        stored = await store.read_outbox(thread_id="t1", limit=1)
        text = json.dumps(stored[0].event.model_dump(mode="json"))
        # The case: valid JSON the decoder refuses (an integer of 5000 digits).
        await harness.corrupt_event(first, text[:-1] + ', "x": ' + "7" * 5000 + "}")
        outbox = store
        stats = await outbox.outbox_stats()
        assert stats.pending == 6
        listed = await store.read_outbox(thread_id="t1")
        assert listed[0].corrupt is not None and listed[0].event.thread_id == "t1"
        batch = await outbox.claim("relay-1", limit=100, lease=30)
        assert {e.event.thread_id for e in batch} == {"t2"} and len(batch) == 3
        [dead] = await outbox.dead_letters()
        assert dead.position == first and dead.dead and dead.corrupt is not None
        assert dead.last_error is not None and dead.last_error.startswith("unreadable")
        after = await outbox.outbox_stats()
        assert (after.dead, after.blocked_threads) == (1, 1)
        assert await outbox.mark_delivered("relay-1", [e.position for e in batch]) == 3
        assert await outbox.claim("relay-2", limit=100, lease=30) == []  # t1 stays held back
        assert (await store.store_status()).dead_events == 1
