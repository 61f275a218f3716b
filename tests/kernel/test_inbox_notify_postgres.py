"""A worker and a watcher in different processes on PostgreSQL, woken by NOTIFY: two store
objects on one schema stand for the two processes, only the watcher's listens. The watch polls
every 30 s, so only a notification can end it within seconds. Through a transaction-mode
PgBouncer the listener is refused and workers and watchers poll."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from intention_kernel.contracts.errors import ConfigurationError, ErrorCode
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.kernel import TurnCompleted
from tests.faults.test_postgres_pgbouncer import bounced_schema, bouncer  # noqa: F401
from tests.support.postgres import drop_schema, require_postgres, scratch_schema

from .support import World, make_world, working

LOOKUP = [{"capability": "orders.lookup", "input": {"order_id": "42"}}]
Pair = tuple[PostgresDurability, PostgresDurability]


@pytest.fixture(scope="module")
def dsn() -> str:
    return require_postgres()


@pytest.fixture
async def pair(dsn: str) -> AsyncIterator[Pair]:
    """The worker's store (triggers on), and the watcher's, which listens."""
    schema = scratch_schema("ik_notify")
    worker = await PostgresDurability.open(dsn, schema=schema, setup=True, max_size=4)
    try:
        await worker.set_inbox_notify(True)
        watcher = await PostgresDurability.open(dsn, schema=schema, max_size=2, listen=True)
        try:
            yield worker, watcher
        finally:
            await watcher.close()
    finally:
        await worker.close()
        await drop_schema(dsn, schema)


async def follow(world: World, turn_id: str, poll_interval: float) -> list[Any]:
    return [
        watched.item
        async for watched in world.agent.watch(
            thread_id="t1", turn_id=turn_id, poll_interval=poll_interval
        )
    ]


async def test_a_watch_in_another_process_sees_the_commit_without_polling(pair: Pair) -> None:
    worker_side, watch_side = make_world(pair[0]), make_world(pair[1])
    worker_side.say("where is 42", LOOKUP)
    await worker_side.agent.submit(thread_id="t1", turn_id="u1", text="where is 42")
    watching = asyncio.create_task(follow(watch_side, "u1", poll_interval=30))
    await asyncio.sleep(0.3)  # the watch has read the pending request and waits
    assert not watching.done()
    started = time.perf_counter()
    async with working(worker_side):
        items = await asyncio.wait_for(watching, 20)
    assert time.perf_counter() - started < 5  # far below the 30 s poll
    assert isinstance(items[-1], TurnCompleted)
    assert "shipped" in items[-1].result.response.text
    assert len(items) > 1  # the progress before the result, woken by its writes too


async def test_a_direct_run_notifies_nobody(pair: Pair) -> None:
    runner, listener = pair
    world = make_world(runner)
    world.say("where is 42", LOOKUP)
    inbox = listener.inbox
    before = inbox.submitted.mark(), inbox.progressed.mark()
    result = await world.run("u1", "where is 42")
    assert not result.replayed
    await asyncio.sleep(0.5)  # a notification arrives in milliseconds
    assert (inbox.submitted.mark(), inbox.progressed.mark()) == before
    # The listener is alive: a submit through the same store wakes it.
    mark = inbox.submitted.mark()
    await world.agent.submit(thread_id="t1", turn_id="u2", text="where is 42")
    await inbox.submitted.wait(mark, 5)
    assert inbox.submitted.mark() != mark


async def test_behind_pgbouncer_listen_is_refused_and_a_watch_polls(
    bouncer: str,  # noqa: F811
    bounced_schema: str,  # noqa: F811
) -> None:
    store = await PostgresDurability.open(
        bouncer, schema=bounced_schema, statement_cache_size=0, max_size=4
    )
    try:
        await store.set_inbox_notify(True)  # NOTIFY itself works through the pooler
        with pytest.raises(ConfigurationError, match="LISTEN") as refused:
            await PostgresDurability.open(
                bouncer, schema=bounced_schema, statement_cache_size=0, listen=True
            )
        assert refused.value.code == ErrorCode.INVALID_CONFIGURATION
        world = make_world(store)
        world.say("where is 42", LOOKUP)
        await world.agent.submit(thread_id="t1", turn_id="u1", text="where is 42")
        async with working(world):
            items = await asyncio.wait_for(follow(world, "u1", poll_interval=0.05), 20)
        assert isinstance(items[-1], TurnCompleted)
    finally:
        await store.close()
