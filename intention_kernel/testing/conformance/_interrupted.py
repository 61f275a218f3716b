"""Interrupted ``prepared`` receipts: a turn ended before recording its effect's outcome.

When the write that records ``completed`` (or ``failed``/``uncertain``) is lost - the store went
away, the backend was terminated - the receipt stays ``prepared`` although its turn is over. A
``prepared`` receipt while no live holder has the thread's lease is, for every operator purpose,
uncertain: listed by ``list_receipts(status=UNCERTAIN)`` (as stored, status ``prepared``),
counted by a ``StoreInspector`` and resolved by ``reconcile`` (which takes the thread's lease
for its write). A ``prepared`` receipt of a turn that is still running is none of these.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import JsonValue

from ...contracts.durability import DurabilityStore
from ...contracts.errors import DurabilityError, EffectUncertainError, ErrorCode, KernelError
from ...contracts.inspect import StoreInspector
from ...contracts.receipts import EffectAuthority, EffectReceipt, ReceiptStatus
from ._support import (
    ConformanceHarness,
    Provider,
    commit_simple,
    conformance_test,
    effect,
    turn_storage,
)

__all__ = ["InterruptedReceipts", "lose_outcome_write"]

KEY = "payments.charge:k1"


async def lose_outcome_write(
    harness: ConformanceHarness, provider: Provider, thread_id: str = "t1"
) -> EffectReceipt:
    """Run a turn whose effect returns but whose ``completed`` write fails every time (the
    store's ``TurnStorage.finish_effect`` raises a retryable ``STORE_UNAVAILABLE``); the turn raises
    out of ``with_turn`` and leaves the receipt ``prepared``."""
    broken: Any = await harness.open()
    turns = turn_storage(broken)

    async def lost(*args: object) -> None:
        raise DurabilityError(
            "the connection was lost while recording the outcome",
            code=ErrorCode.STORE_UNAVAILABLE,
            retryable=True,
        )

    turns.finish_effect = lost
    broken.record_retry_seconds = 0.05  # the turn scope retries a lost write; not long
    with pytest.raises(KernelError):
        await commit_simple(
            broken, thread_id, "turn-1", effects=[(effect("k1"), provider.returning("ch_1"))]
        )
    assert provider.calls[KEY] == 1
    receipt = await broken.get_receipt(thread_id, KEY)
    assert receipt is not None and receipt.status is ReceiptStatus.PREPARED
    assert isinstance(receipt, EffectReceipt)
    return receipt


async def _counts(store: DurabilityStore, thread_id: str) -> tuple[int, int] | None:
    """``(store_status().uncertain_receipts, the thread's summary count)`` of an inspector."""
    if not isinstance(store, StoreInspector):
        return None
    status = await store.store_status()
    [summary] = [t for t in await store.list_threads() if t.thread_id == thread_id]
    return status.uncertain_receipts, summary.uncertain_receipts


class InterruptedReceipts:
    @conformance_test
    async def test_interrupted_prepared_receipt_is_listed_and_counted_as_uncertain(
        self, harness: ConformanceHarness
    ) -> None:
        provider = Provider()
        left = await lose_outcome_write(harness, provider)
        store = await harness.open()
        listed = await store.list_receipts(status=ReceiptStatus.UNCERTAIN)
        assert [(r.thread_id, r.idempotency_key, r.status) for r in listed] == [
            ("t1", KEY, ReceiptStatus.PREPARED)  # returned as stored
        ]
        assert listed[0] == left
        in_thread = await store.list_receipts(status=ReceiptStatus.UNCERTAIN, thread_id="t1")
        assert [r.id for r in in_thread] == [left.id]
        assert await store.list_receipts(status=ReceiptStatus.UNCERTAIN, thread_id="t2") == []
        assert [r.id for r in await store.list_receipts(status=ReceiptStatus.PREPARED)] == [left.id]
        assert await _counts(store, "t1") in (None, (1, 1))
        # The next turn that needs the write fails closed and never calls the provider.
        with pytest.raises(EffectUncertainError):
            await commit_simple(
                store, "t1", "turn-2", effects=[(effect("k1"), provider.returning("again"))]
            )
        assert provider.total() == 1
        receipt = await store.get_receipt("t1", KEY)
        assert receipt is not None and receipt.status is ReceiptStatus.UNCERTAIN
        assert await _counts(store, "t1") in (None, (1, 1))

    @conformance_test
    async def test_interrupted_prepared_receipt_reconciles_as_completed(
        self, harness: ConformanceHarness
    ) -> None:
        provider = Provider()
        left = await lose_outcome_write(harness, provider)
        store = await harness.open()
        receipt = await store.reconcile(
            "t1", KEY, "completed", value={"charge": "ch_1"}, note="seen at the provider", actor="a"
        )
        assert (receipt.status, receipt.value, receipt.id) == (
            ReceiptStatus.COMPLETED,
            {"charge": "ch_1"},
            left.id,
        )
        [record] = await store.reconciliations(thread_id="t1")
        assert record.previous_status is ReceiptStatus.PREPARED
        assert (record.outcome, record.receipt_id) == ("completed", left.id)
        assert await store.list_receipts(status=ReceiptStatus.UNCERTAIN) == []
        assert await _counts(store, "t1") in (None, (0, 0))
        _, executions, _ = await commit_simple(
            store, "t1", "turn-2", effects=[(effect("k1"), provider.returning("again"))]
        )
        assert executions[0].replayed and executions[0].value == {"charge": "ch_1"}
        assert provider.total() == 1

    @conformance_test
    async def test_interrupted_prepared_receipt_reconciles_as_not_applied(
        self, harness: ConformanceHarness
    ) -> None:
        provider = Provider()
        left = await lose_outcome_write(harness, provider)
        store = await harness.open()
        receipt = await store.reconcile("t1", KEY, "not_applied", note="no charge", actor="a")
        assert (receipt.status, receipt.id) == (ReceiptStatus.FAILED, left.id)
        [record] = await store.reconciliations(idempotency_key=KEY)
        assert (record.previous_status, record.outcome) == (ReceiptStatus.PREPARED, "not_applied")
        _, executions, _ = await commit_simple(
            store, "t1", "turn-2", effects=[(effect("k1"), provider.returning("ch_2"))]
        )
        assert not executions[0].replayed and executions[0].value == "ch_2"
        assert executions[0].receipt.id == left.id
        assert provider.total() == 2

    @conformance_test
    async def test_prepared_receipt_of_a_running_turn_is_not_uncertain(
        self, harness: ConformanceHarness
    ) -> None:
        """Mid-effect, the receipt is ``prepared`` and the lease is held: it is not listed or
        counted as uncertain, and ``reconcile`` waits for the lease, then ``LOCK_TIMEOUT``."""
        store = await harness.open()
        started, release = asyncio.Event(), asyncio.Event()

        async def parked(authority: EffectAuthority) -> JsonValue:
            started.set()
            await release.wait()
            return "ch_1"

        turn = asyncio.create_task(
            commit_simple(store, "t1", "turn-1", effects=[(effect("k1"), parked)])
        )
        try:
            await asyncio.wait_for(started.wait(), 10)
            observer = await harness.open(lock_timeout=0.3)
            receipt = await observer.get_receipt("t1", KEY)
            assert receipt is not None and receipt.status is ReceiptStatus.PREPARED
            assert await observer.list_receipts(status=ReceiptStatus.UNCERTAIN) == []
            assert (
                await observer.list_receipts(status=ReceiptStatus.UNCERTAIN, thread_id="t1") == []
            )
            assert await _counts(observer, "t1") in (None, (0, 0))
            with pytest.raises(DurabilityError) as caught:
                await observer.reconcile("t1", KEY, "completed", value=1, note="n", actor="a")
            assert caught.value.code == ErrorCode.LOCK_TIMEOUT and caught.value.retryable
            receipt = await observer.get_receipt("t1", KEY)
            assert receipt is not None and receipt.status is ReceiptStatus.PREPARED
        finally:
            release.set()
            _, executions, _ = await turn
        assert executions[0].value == "ch_1" and not executions[0].replayed
        receipt = await store.get_receipt("t1", KEY)
        assert receipt is not None and receipt.status is ReceiptStatus.COMPLETED
        assert await store.reconciliations() == []
