"""Rule 7: committed turns, receipts and events survive a restart of the adapter."""

from __future__ import annotations

import pytest

from ...contracts.errors import EffectUncertainError
from ...contracts.receipts import ReceiptStatus
from ._support import (
    ConformanceHarness,
    Provider,
    commit_simple,
    conformance_test,
    effect,
    latest_checkpoint,
)

__all__ = ["Rule7Restart"]


class Rule7Restart:
    @conformance_test
    async def test_rule7_committed_turn_survives_a_restart(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        result, _, _ = await commit_simple(
            store, "t1", "turn-1", effects=[(effect("k1"), provider.returning({"id": 7}))]
        )
        await store.close()
        restarted = await harness.open()
        again, _, replayed = await commit_simple(store=restarted, thread_id="t1", turn_id="turn-1")
        assert replayed and again == result
        assert await latest_checkpoint(restarted, "t1") == result.checkpoint
        assert len(await restarted.read_outbox(thread_id="t1")) == 3
        receipt = await restarted.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.status is ReceiptStatus.COMPLETED
        assert receipt.value == {"id": 7}

    @conformance_test
    async def test_rule7_uncertain_receipt_survives_a_restart(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        with pytest.raises(EffectUncertainError):
            await commit_simple(
                store, "t1", "turn-1", effects=[(effect("k1"), provider.raising(OSError("io")))]
            )
        await store.close()
        restarted = await harness.open()
        with pytest.raises(EffectUncertainError):
            await commit_simple(
                restarted, "t1", "turn-1", effects=[(effect("k1"), provider.returning(1))]
            )
        assert provider.total() == 1
