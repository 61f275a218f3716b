"""Rule 3: a committed turn is replayed, never executed twice; turn ids are unique."""

from __future__ import annotations

import asyncio

import pytest

from ...contracts.durability import TurnScope
from ...contracts.errors import ErrorCode, TurnConflictError
from ...contracts.turns import DurableTurnResult
from ._support import (
    ConformanceHarness,
    Provider,
    commit_simple,
    conformance_test,
    effect,
    make_result,
)

__all__ = ["Rule3Replay"]


class Rule3Replay:
    @conformance_test
    async def test_rule3_replay_returns_the_committed_result_and_runs_nothing(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        first, _, replayed_first = await commit_simple(
            store, "t1", "turn-1", effects=[(effect("k1"), provider.returning({"id": "ch_1"}))]
        )
        second, executions, replayed_second = await commit_simple(
            store, "t1", "turn-1", effects=[(effect("k1"), provider.returning({"id": "other"}))]
        )
        assert (replayed_first, replayed_second) == (False, True)
        assert second == first
        assert executions == []
        assert provider.total() == 1

    @conformance_test
    async def test_rule3_commit_on_a_replayed_scope_is_refused(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        await commit_simple(store, "t1", "turn-1")

        async def operation(scope: TurnScope) -> None:
            assert scope.prior_result is not None
            await scope.commit(scope.prior_result)

        with pytest.raises(TurnConflictError) as caught:
            await store.with_turn("t1", "turn-1", operation)
        assert caught.value.code == ErrorCode.TURN_ALREADY_COMMITTED
        assert len(await store.list_turns("t1")) == 1

    @conformance_test
    async def test_rule3_run_effect_on_a_replayed_scope_is_refused(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        await commit_simple(store, "t1", "turn-1")

        async def operation(scope: TurnScope) -> None:
            await scope.run_effect(effect("k1"), provider.returning(1))

        with pytest.raises(TurnConflictError) as caught:
            await store.with_turn("t1", "turn-1", operation)
        assert caught.value.code == ErrorCode.TURN_ALREADY_COMMITTED
        assert provider.total() == 0

    @conformance_test
    async def test_rule3_turn_id_reused_with_another_request_is_refused(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        await commit_simple(store, "t1", "turn-1", fingerprint="request-a")
        with pytest.raises(TurnConflictError) as caught:
            await commit_simple(store, "t1", "turn-1", fingerprint="request-b")
        assert caught.value.code == ErrorCode.TURN_ID_REUSED
        assert not caught.value.retryable

    @conformance_test
    async def test_rule3_same_request_fingerprint_replays(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        first, _, _ = await commit_simple(store, "t1", "turn-1", fingerprint="request-a")
        again, _, replayed = await commit_simple(store, "t1", "turn-1", fingerprint="request-a")
        assert replayed and again == first

    @conformance_test
    async def test_rule3_concurrent_deliveries_of_one_turn_commit_once(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        outcomes = await asyncio.gather(
            *(
                commit_simple(store, "t1", "turn-1", effects=[(effect("k"), provider.returning(i))])
                for i in range(5)
            )
        )
        results = {o[0].model_dump_json() for o in outcomes}
        assert len(results) == 1
        assert sum(1 for o in outcomes if not o[2]) == 1
        assert provider.total() == 1
        assert len(await store.list_turns("t1")) == 1

    @conformance_test
    async def test_rule3_turn_ids_are_scoped_to_their_thread(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        _, _, replayed_a = await commit_simple(store, "thread-a", "turn-1")
        _, _, replayed_b = await commit_simple(store, "thread-b", "turn-1")
        assert not replayed_a and not replayed_b

    @conformance_test
    async def test_rule3_replayed_scope_carries_that_turns_checkpoint(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        first, _, _ = await commit_simple(store, "t1", "turn-1")
        await commit_simple(store, "t1", "turn-2")
        seen: list[DurableTurnResult | None] = []

        async def operation(scope: TurnScope) -> None:
            seen.append(scope.prior_result)
            assert scope.checkpoint == first.checkpoint

        await store.with_turn("t1", "turn-1", operation)
        assert seen == [first]

    @conformance_test
    async def test_rule3_unique_turn_even_if_operation_ignores_prior_result(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        await commit_simple(store, "t1", "turn-1")

        async def careless(scope: TurnScope) -> None:
            await scope.commit(make_result(scope))

        with pytest.raises(TurnConflictError):
            await store.with_turn("t1", "turn-1", careless)
        assert len(await store.list_turns("t1")) == 1
