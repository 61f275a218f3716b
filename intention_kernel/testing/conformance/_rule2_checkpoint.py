"""Rule 2: the latest checkpoint is loaded while holding the lease, exactly as committed."""

from __future__ import annotations

from datetime import UTC, datetime

from ...contracts.checkpoint import (
    AgendaItem,
    Evidence,
    FactRecord,
    Interaction,
    KernelCheckpoint,
    Message,
)
from ...contracts.durability import TurnScope
from ...contracts.turns import DurableTurnResult
from ._support import (
    ConformanceHarness,
    Provider,
    commit_simple,
    conformance_test,
    effect,
    latest_checkpoint,
)

__all__ = ["Rule2Checkpoint"]


def rich_checkpoint(
    revision: int, receipt_source: DurableTurnResult | None = None
) -> KernelCheckpoint:
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    return KernelCheckpoint(
        revision=revision,
        agent_fingerprint="sha256:abc",
        messages=[Message(role="user", text='Zürich → 東京 🚆 "quoted"', turn_id="t", at=at)],
        omitted_messages=7,
        facts=[
            FactRecord(
                id="fact-1",
                type="order",
                version=2,
                revision=3,
                value={"total": 12.5, "items": [1, 2, {"sku": "A"}], "big": 2**62, "none": None},
                evidence=[Evidence(id="ev-1", capability_id="orders.read", turn_id="t")],
                derived_from=["fact-0"],
                turn_id="t",
            )
        ],
        agenda=[
            AgendaItem(
                id="ag-1",
                capability_id="payments.charge",
                capability_version="1.0.0",
                input={"amount": 100},
                status="awaiting_confirmation",
                created_turn_id="t",
            )
        ],
        interaction=Interaction(
            id="ia-1",
            kind="confirmation",
            prompt="Charge 1.00 EUR?",
            options=["yes", "no"],
            agenda_item_id="ag-1",
            turn_id="t",
        ),
        receipts=[] if receipt_source is None else list(receipt_source.checkpoint.receipts),
        metadata={"planned": {"capability": "payments.charge", "input": {"amount": 100}}},
    )


class Rule2Checkpoint:
    @conformance_test
    async def test_rule2_new_thread_has_no_checkpoint(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        seen: list[KernelCheckpoint | None] = []

        async def operation(scope: TurnScope) -> None:
            seen.append(scope.checkpoint)

        await store.with_turn("fresh", "turn-1", operation)
        assert seen == [None]
        assert await latest_checkpoint(store, "fresh") is None

    @conformance_test
    async def test_rule2_loads_the_latest_checkpoint(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        for i in range(3):
            await commit_simple(store, "t1", f"turn-{i}")
        latest: list[KernelCheckpoint | None] = []

        async def operation(scope: TurnScope) -> None:
            latest.append(scope.checkpoint)

        await store.with_turn("t1", "turn-3", operation)
        committed = await store.get_turn("t1", "turn-2")
        assert committed is not None
        assert latest[0] == committed.checkpoint
        assert latest[0] is not None and latest[0].revision == 3

    @conformance_test
    async def test_rule2_checkpoint_round_trips_exactly(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        provider = Provider()
        await commit_simple(store, "t1", "turn-0", effects=[(effect("k"), provider.returning(1))])
        checkpoint = rich_checkpoint(2)

        async def operation(scope: TurnScope) -> None:
            result = DurableTurnResult(
                thread_id="t1",
                turn_id="turn-1",
                trace_id="tr",
                response={"a": [1.5, "x"]},
                checkpoint=checkpoint,
            )
            await scope.commit(result)

        await store.with_turn("t1", "turn-1", operation)
        loaded = await latest_checkpoint(store, "t1")
        assert loaded == checkpoint
        assert loaded is not None
        assert loaded.model_dump(mode="json") == checkpoint.model_dump(mode="json")

    @conformance_test
    async def test_rule2_returned_checkpoints_are_copies(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        await commit_simple(store, "t1", "turn-0")
        first = await latest_checkpoint(store, "t1")
        assert first is not None
        first.messages.clear()
        again = await latest_checkpoint(store, "t1")
        assert again is not None and len(again.messages) == 2
