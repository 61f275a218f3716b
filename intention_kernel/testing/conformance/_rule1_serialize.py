"""Rule 1: one holder per thread, other threads free, bounded waits, fencing."""

from __future__ import annotations

import asyncio

import pytest

from ...contracts.durability import TurnScope
from ...contracts.errors import DurabilityError, ErrorCode, LeaseLostError
from ._support import (
    ConformanceHarness,
    Provider,
    conformance_test,
    effect,
    latest_checkpoint,
    make_result,
)

__all__ = ["Rule1Serialize"]


class Rule1Serialize:
    @conformance_test
    async def test_rule1_one_holder_per_thread(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        inside = 0
        most = 0

        async def operation(scope: TurnScope) -> None:
            nonlocal inside, most
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.02)
            inside -= 1
            await scope.commit(make_result(scope))

        await asyncio.gather(*(store.with_turn("t1", f"turn-{i}", operation) for i in range(6)))
        assert most == 1
        checkpoint = await latest_checkpoint(store, "t1")
        assert checkpoint is not None and checkpoint.revision == 6

    @conformance_test
    async def test_rule1_other_threads_are_not_blocked(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        release = asyncio.Event()
        entered = asyncio.Event()

        async def holder(scope: TurnScope) -> None:
            entered.set()
            await release.wait()
            await scope.commit(make_result(scope))

        async def other(scope: TurnScope) -> str:
            await scope.commit(make_result(scope))
            return "done"

        held = asyncio.create_task(store.with_turn("a", "turn-1", holder))
        await entered.wait()
        assert await asyncio.wait_for(store.with_turn("b", "turn-1", other), 5) == "done"
        release.set()
        await held

    @conformance_test
    async def test_rule1_lock_timeout_is_a_retryable_error(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        waiter = await harness.open(lock_timeout=0.2)
        release = asyncio.Event()
        entered = asyncio.Event()

        async def holder(scope: TurnScope) -> None:
            entered.set()
            await release.wait()

        async def never(scope: TurnScope) -> None:
            raise AssertionError("must not run while the thread is held")

        held = asyncio.create_task(store.with_turn("t1", "turn-1", holder))
        await entered.wait()
        with pytest.raises(DurabilityError) as caught:
            await waiter.with_turn("t1", "turn-2", never)
        assert caught.value.code == ErrorCode.LOCK_TIMEOUT
        assert caught.value.retryable
        release.set()
        await held

    @conformance_test
    async def test_rule1_lost_lease_fences_effect_writes(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        provider = Provider()

        async def operation(scope: TurnScope) -> None:
            await harness.revoke_lease("t1")
            await scope.run_effect(effect("k1"), provider.returning("charged"))

        with pytest.raises(LeaseLostError) as caught:
            await store.with_turn("t1", "turn-1", operation)
        assert caught.value.code == ErrorCode.LEASE_LOST
        assert provider.total() == 0
        assert await store.get_receipt("t1", "payments.charge:k1") is None

    @conformance_test
    async def test_rule1_lost_lease_fences_the_commit(self, harness: ConformanceHarness) -> None:
        store = await harness.open()

        async def operation(scope: TurnScope) -> None:
            result = make_result(scope)
            await harness.revoke_lease("t1")
            await scope.commit(result)

        with pytest.raises(LeaseLostError):
            await store.with_turn("t1", "turn-1", operation)
        assert await store.get_turn("t1", "turn-1") is None
        assert await latest_checkpoint(store, "t1") is None
        assert await store.read_outbox(thread_id="t1") == []

    @conformance_test
    async def test_rule1_lease_is_released_after_a_failed_operation(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open(lock_timeout=2)

        async def failing(scope: TurnScope) -> None:
            raise RuntimeError("model timed out")

        async def succeeding(scope: TurnScope) -> str:
            await scope.commit(make_result(scope))
            return "ok"

        with pytest.raises(RuntimeError):
            await store.with_turn("t1", "turn-1", failing)
        assert await store.with_turn("t1", "turn-1", succeeding) == "ok"
