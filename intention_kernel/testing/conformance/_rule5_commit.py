"""Rule 5: result, checkpoint and outbox commit atomically, once, with revision CAS."""

from __future__ import annotations

import pytest

from ...contracts.durability import TurnScope
from ...contracts.errors import (
    ErrorCode,
    InvalidInputError,
    SerializationError,
    TurnConflictError,
)
from ...contracts.turns import DurableTurnResult
from ._support import (
    ConformanceHarness,
    commit_simple,
    conformance_test,
    latest_checkpoint,
    make_events,
    make_result,
)

__all__ = ["Rule5Commit"]


class Rule5Commit:
    @conformance_test
    async def test_rule5_result_checkpoint_and_outbox_commit_together(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        result, _, _ = await commit_simple(store, "t1", "turn-1")
        assert await store.get_turn("t1", "turn-1") == result
        assert await latest_checkpoint(store, "t1") == result.checkpoint
        events = await store.read_outbox(thread_id="t1")
        assert [e.event.sequence for e in events] == [0, 1, 2]
        assert {e.event.turn_id for e in events} == {"turn-1"}
        positions = [e.position for e in events]
        assert positions == sorted(positions) and len(set(positions)) == 3

    @conformance_test
    async def test_rule5_outbox_reads_back_in_commit_order(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        for i in range(3):
            await commit_simple(store, "t1", f"turn-{i}")
            await commit_simple(store, "t2", f"turn-{i}")
        events = await store.read_outbox(thread_id="t1")
        assert [(e.event.turn_id, e.event.sequence) for e in events] == [
            (f"turn-{i}", s) for i in range(3) for s in range(3)
        ]
        everything = await store.read_outbox()
        assert len(everything) == 18
        tail = await store.read_outbox(after_position=everything[9].position, limit=4)
        assert tail == everything[10:14]
        only = await store.read_outbox(thread_id="t2", turn_id="turn-1")
        assert len(only) == 3 and {e.event.turn_id for e in only} == {"turn-1"}

    @conformance_test
    async def test_rule5_commit_twice_is_refused(self, harness: ConformanceHarness) -> None:
        store = await harness.open()

        async def twice(scope: TurnScope) -> None:
            result = make_result(scope)
            await scope.commit(result)
            await scope.commit(result)

        with pytest.raises(TurnConflictError) as caught:
            await store.with_turn("t1", "turn-1", twice)
        assert caught.value.code == ErrorCode.TURN_ALREADY_COMMITTED
        assert len(await store.list_turns("t1")) == 1

    @conformance_test
    async def test_rule5_successor_revision_must_be_loaded_plus_one(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        await commit_simple(store, "t1", "turn-1")

        async def skipping(scope: TurnScope) -> None:
            result = make_result(scope)
            bumped = result.checkpoint.model_copy(update={"revision": 5})
            await scope.commit(result.model_copy(update={"checkpoint": bumped}))

        with pytest.raises(TurnConflictError) as caught:
            await store.with_turn("t1", "turn-2", skipping)
        assert caught.value.code == ErrorCode.CHECKPOINT_REVISION_CONFLICT
        assert await store.get_turn("t1", "turn-2") is None
        checkpoint = await latest_checkpoint(store, "t1")
        assert checkpoint is not None and checkpoint.revision == 1

    @conformance_test
    async def test_rule5_unstorable_result_commits_nothing(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()

        async def bad_then_good(scope: TurnScope) -> str:
            with pytest.raises(SerializationError) as caught:
                await scope.commit(make_result(scope, {"score": float("inf")}))
            assert caught.value.code == ErrorCode.NON_FINITE_NUMBER
            assert await store.get_turn("t1", "turn-1") is None
            await scope.commit(make_result(scope))
            return "committed"

        assert await store.with_turn("t1", "turn-1", bad_then_good) == "committed"
        assert len(await store.list_turns("t1")) == 1

    @conformance_test
    async def test_rule5_outbox_of_another_turn_is_refused(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()

        async def foreign(scope: TurnScope) -> None:
            events = make_events(scope)
            stray = events[0].model_copy(update={"turn_id": "turn-other"})
            await scope.commit(make_result(scope), [stray, *events[1:]])

        with pytest.raises(InvalidInputError) as caught:
            await store.with_turn("t1", "turn-1", foreign)
        assert caught.value.code == ErrorCode.TURN_RESULT_MISMATCH
        assert await store.read_outbox() == []
        assert await store.get_turn("t1", "turn-1") is None

    @conformance_test
    async def test_rule5_result_for_another_turn_is_refused(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()

        async def wrong(scope: TurnScope) -> None:
            result: DurableTurnResult = make_result(scope).model_copy(update={"turn_id": "x"})
            await scope.commit(result)

        with pytest.raises(InvalidInputError) as caught:
            await store.with_turn("t1", "turn-1", wrong)
        assert caught.value.code == ErrorCode.TURN_RESULT_MISMATCH
        assert await store.list_turns("t1") == []
