"""Rule 6: a failed operation commits nothing; completed effects stay in the ledger."""

from __future__ import annotations

import pytest

from ...contracts.durability import TurnScope
from ...contracts.receipts import ReceiptStatus
from ._support import (
    ConformanceHarness,
    Provider,
    commit_simple,
    conformance_test,
    effect,
    latest_checkpoint,
    make_events,
    make_result,
)

__all__ = ["Rule6FailedOperation"]


class Rule6FailedOperation:
    @conformance_test
    async def test_rule6_failed_operation_commits_nothing_and_keeps_effects(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()

        async def failing(scope: TurnScope) -> None:
            await scope.run_effect(effect("k1"), provider.returning("ch_1"))
            make_result(scope)
            make_events(scope)
            raise RuntimeError("response composition failed")

        with pytest.raises(RuntimeError):
            await store.with_turn("t1", "turn-1", failing)
        assert await store.get_turn("t1", "turn-1") is None
        assert await latest_checkpoint(store, "t1") is None
        assert await store.read_outbox(thread_id="t1") == []
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.status is ReceiptStatus.COMPLETED

        result, executions, replayed = await commit_simple(
            store, "t1", "turn-1", effects=[(effect("k1"), provider.returning("ch_2"))]
        )
        assert not replayed
        assert executions[0].replayed and executions[0].value == "ch_1"
        assert provider.total() == 1
        assert result.response == {"effects": ["ch_1"]}
