"""Reconciliation of uncertain receipts, and listing them across threads."""

from __future__ import annotations

import pytest

from ...contracts.durability import DurabilityStore, TurnScope
from ...contracts.errors import EffectConflictError, EffectUncertainError, ErrorCode
from ...contracts.receipts import EffectReceipt, ReceiptStatus
from ._support import ConformanceHarness, Provider, commit_simple, conformance_test, effect

__all__ = ["Reconcile"]


async def make_uncertain(
    store: DurabilityStore, provider: Provider, thread_id: str, key: str
) -> None:
    with pytest.raises(EffectUncertainError):
        await commit_simple(
            store,
            thread_id,
            "turn-1",
            effects=[(effect(key), provider.raising(TimeoutError("gateway timeout")))],
        )


class Reconcile:
    @conformance_test
    async def test_reconcile_uncertain_as_completed_replays_the_value(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        await make_uncertain(store, provider, "t1", "k1")
        receipt = await store.reconcile(
            "t1",
            "payments.charge:k1",
            "completed",
            value={"charge": "ch_9"},
            note="found in the provider dashboard",
            actor="ops@example.com",
        )
        assert receipt.status is ReceiptStatus.COMPLETED
        _, executions, _ = await commit_simple(
            store, "t1", "turn-1", effects=[(effect("k1"), provider.returning("new"))]
        )
        assert executions[0].replayed and executions[0].value == {"charge": "ch_9"}
        assert provider.total() == 1
        history = await store.reconciliations(thread_id="t1")
        assert len(history) == 1
        assert history[0].previous_status is ReceiptStatus.UNCERTAIN
        assert (history[0].outcome, history[0].actor) == ("completed", "ops@example.com")

    @conformance_test
    async def test_reconcile_uncertain_as_not_applied_allows_one_retry(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        await make_uncertain(store, provider, "t1", "k1")
        receipt = await store.reconcile(
            "t1",
            "payments.charge:k1",
            "not_applied",
            note="no charge at the provider",
            actor="ops",
        )
        assert receipt.status is ReceiptStatus.FAILED
        _, executions, _ = await commit_simple(
            store, "t1", "turn-1", effects=[(effect("k1"), provider.returning("ch_1"))]
        )
        assert not executions[0].replayed and executions[0].value == "ch_1"
        assert executions[0].receipt.id == receipt.id
        assert provider.total() == 2

    @conformance_test
    async def test_reconcile_refuses_receipts_that_are_not_uncertain(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        await commit_simple(store, "t1", "turn-1", effects=[(effect("k1"), provider.returning(1))])
        with pytest.raises(EffectConflictError) as caught:
            await store.reconcile("t1", "payments.charge:k1", "not_applied", note="n", actor="a")
        assert caught.value.code == ErrorCode.RECEIPT_NOT_UNCERTAIN
        with pytest.raises(EffectConflictError) as missing:
            await store.reconcile(
                "t1", "payments.charge:none", "completed", value=1, note="n", actor="a"
            )
        assert missing.value.code == ErrorCode.RECEIPT_NOT_FOUND
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.status is ReceiptStatus.COMPLETED
        assert await store.reconciliations() == []

    @conformance_test
    async def test_reconcile_resolves_exactly_once(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        provider = Provider()
        await make_uncertain(store, provider, "t1", "k1")
        await store.reconcile("t1", "payments.charge:k1", "completed", value=1, note="n", actor="a")
        with pytest.raises(EffectConflictError):
            await store.reconcile(
                "t1", "payments.charge:k1", "completed", value=2, note="n", actor="b"
            )
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.value == 1
        assert len(await store.reconciliations(idempotency_key="payments.charge:k1")) == 1

    @conformance_test
    async def test_list_uncertain_receipts_across_threads(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        await make_uncertain(store, provider, "t1", "k1")
        await make_uncertain(store, provider, "t2", "k2")
        await commit_simple(store, "t3", "turn-1", effects=[(effect("k3"), provider.returning(1))])
        uncertain = await store.list_receipts(status=ReceiptStatus.UNCERTAIN)
        assert [(r.thread_id, r.idempotency_key) for r in uncertain] == [
            ("t1", "payments.charge:k1"),
            ("t2", "payments.charge:k2"),
        ]
        assert len(await store.list_receipts(status=ReceiptStatus.UNCERTAIN, limit=1)) == 1
        assert len(await store.list_receipts(thread_id="t3")) == 1

    @conformance_test
    async def test_scope_receipts_reads_the_reconciled_state(
        self, harness: ConformanceHarness
    ) -> None:
        """``TurnScope.receipts``: the ledger's current receipts of the thread, in key order."""
        store = await harness.open()
        provider = Provider()
        await make_uncertain(store, provider, "t1", "k1")
        await make_uncertain(store, provider, "t2", "k2")
        await store.reconcile("t1", "payments.charge:k1", "completed", value=7, note="n", actor="a")
        keys = ["payments.charge:none", "payments.charge:k2", "payments.charge:k1"]

        async def read(scope: TurnScope) -> list[EffectReceipt]:
            return await scope.receipts(keys)

        found = await store.with_turn("t1", "turn-2", read)
        assert [(r.idempotency_key, r.status, r.value) for r in found] == [
            ("payments.charge:k1", ReceiptStatus.COMPLETED, 7)
        ]
        other = await store.with_turn("t2", "turn-2", read)
        assert [(r.idempotency_key, r.status) for r in other] == [
            ("payments.charge:k2", ReceiptStatus.UNCERTAIN)
        ]
