"""A submit hands its request to an idle worker of the agent in the same process (memory,
SQLite, PostgreSQL): the submit is also the claim, and a worker whose turns were handed over
does not look for more after each of them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from intention_kernel.contracts.inbox import InboxRequest, RequestState
from intention_kernel.kernel import Worker

from .support import World
from .test_inbox_worker import LOOKUP, settled


class CountedClaims:
    """Wraps the inbox's ``claim``: what the worker's own claims found."""

    def __init__(self, inbox: Any) -> None:
        self.inbox, self.claim = inbox, inbox.claim
        self.calls = 0
        self.found: list[tuple[str, str]] = []
        inbox.claim = self._claim

    async def _claim(self, worker_id: str, *, ttl: float) -> InboxRequest | None:
        self.calls += 1
        request: InboxRequest | None = await self.claim(worker_id, ttl=ttl)
        if request is not None:
            self.found.append(request.key)
        return request


async def free(worker: Worker) -> None:
    """Until the worker can take a request (started, or done with its turn's bookkeeping:
    the request is done a moment before the worker's slot frees)."""
    async with asyncio.timeout(5):
        while not worker.can_take():  # noqa: ASYNC110 - the worker has no event for it
            await asyncio.sleep(0.002)


@asynccontextmanager
async def started(world: World, **settings: Any) -> AsyncIterator[Worker]:
    worker = world.agent.worker(**{"claim_ttl": 5.0, "poll_interval": 5.0, **settings})
    task = asyncio.create_task(worker.run())
    try:
        await free(worker)
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)


async def test_a_submit_hands_its_request_to_an_idle_worker(world: World) -> None:
    world.say("where is 42", LOOKUP)
    claims = CountedClaims(world.durability.inbox)  # type: ignore[attr-defined]
    async with started(world) as worker:
        request = await world.agent.submit(thread_id="t1", turn_id="u1", text="where is 42")
        assert (request.state, request.claimed_by, request.attempts) == (
            RequestState.RUNNING,
            worker.worker_id,
            1,
        )
        assert await settled(world, "t1", "u1") is RequestState.DONE
    assert ("t1", "u1") not in claims.found  # run without a claim of the worker's own
    assert world.shop.calls == {"orders.lookup": 1}


async def test_a_worker_does_not_claim_after_each_handed_over_turn(world: World) -> None:
    world.say("where is 42", LOOKUP)
    claims = CountedClaims(world.durability.inbox)  # type: ignore[attr-defined]
    async with started(world, concurrency=1) as worker:
        for n in range(20):
            await free(worker)
            request = await world.agent.submit(thread_id="t1", turn_id=f"u{n}", text="where is 42")
            assert request.state is RequestState.RUNNING, request
            assert await settled(world, "t1", f"u{n}") is RequestState.DONE
    # Only the polls for other processes' submits (backing off from 10 ms to 5 s: 20 of them
    # take about a minute), not one per turn.
    assert claims.found == [] and claims.calls < 20, claims.calls
    assert world.shop.calls == {"orders.lookup": 20}


async def test_a_busy_worker_leaves_the_request_to_its_claim(world: World) -> None:
    world.say("where is 42", LOOKUP)
    world.shop.delay = 0.3
    claims = CountedClaims(world.durability.inbox)  # type: ignore[attr-defined]
    # Polling every 30 s: a request left to the claim is claimed as its slot frees, or the
    # second turn would wait for the poll and ``settled`` (10 s) would give up.
    async with started(world, concurrency=1, poll_interval=30.0):
        first = await world.agent.submit(thread_id="t1", turn_id="u1", text="where is 42")
        second = await world.agent.submit(thread_id="t2", turn_id="u1", text="where is 42")
        same_thread = await world.agent.submit(thread_id="t1", turn_id="u2", text="where is 42")
        assert first.state is RequestState.RUNNING
        assert (second.state, second.claimed_by) == (RequestState.PENDING, None)  # no slot
        assert same_thread.state is RequestState.PENDING
        for thread_id, turn_id in (("t1", "u1"), ("t2", "u1"), ("t1", "u2")):
            assert await settled(world, thread_id, turn_id) is RequestState.DONE
    assert set(claims.found) == {("t2", "u1"), ("t1", "u2")}  # claimed when the slot freed
    assert world.shop.max_inside == 1
