"""The PostgreSQL store's kept connections (``Lanes``) on a real server: they go back to the
pool when idle or when a statement ends abnormally, waiters are served in turn within the
statement budget, and no interleaving of statements and cancellations leaks or double-uses a
connection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intention_kernel.contracts.errors import DurabilityError, ErrorCode
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.durability.postgres._lanes import IDLE_SECONDS
from intention_kernel.testing.conformance import commit_simple
from tests.support.postgres import drop_schema, scratch_schema

from .conftest import open_store

SLEEP = "SELECT pg_sleep($1::float8)"


async def pool_free(store: PostgresDurability, within: float = 3.0) -> bool:
    """Every pool connection can be checked out at once, within ``within`` seconds."""
    pool = store.pool
    taken: list[Any] = []
    try:
        async with asyncio.timeout(within):
            for _ in range(pool.get_max_size()):
                taken.append(await pool.acquire())
        return True
    except TimeoutError:
        return False
    finally:
        for conn in taken:
            await pool.release(conn)


def consistent(store: PostgresDurability) -> None:
    lanes = store.connection.lanes
    assert len(lanes._idle) <= lanes._open <= lanes._limit
    assert len(set(map(id, lanes._idle))) == len(lanes._idle)  # never twice on the stack


async def test_idle_lanes_go_back_to_the_pool(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema, max_size=3)
    await asyncio.gather(*(commit_simple(store, f"t{i}", "turn-1") for i in range(6)))
    assert store.connection.lanes._open >= 1  # kept between statements
    consistent(store)
    await asyncio.sleep(IDLE_SECONDS * 2.5)
    assert store.connection.lanes._open == 0
    assert await pool_free(store, within=0.5)  # all of them, at once
    await commit_simple(store, "t0", "turn-2")  # and the store takes them again
    await store.close()


async def test_a_busy_store_keeps_the_lanes_it_uses(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema, max_size=3)
    ended = time.monotonic() + IDLE_SECONDS * 4
    opened: set[int] = set()
    n = 0
    while time.monotonic() < ended:  # one statement after another: one lane, reused
        n += 1
        await commit_simple(store, "t1", f"turn-{n}")
        opened.update(map(id, store.connection.lanes._idle))
    assert len(opened) == 1
    await store.close()


async def test_a_server_refusal_keeps_the_connection(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema, max_size=2)
    await store.connection.fetchrow("SELECT 1")
    (kept,) = store.connection.lanes._idle
    with pytest.raises(DurabilityError):
        await store.connection.fetchrow("SELECT 1 / 0")
    assert store.connection.lanes._idle == [kept]  # idle and usable: not sent back to the pool
    assert await store.connection.fetchrow("SELECT 2 AS two") == (2,)
    await store.close()


async def test_a_cancelled_statement_sends_its_connection_back_to_the_pool(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema, max_size=1)
    running = asyncio.ensure_future(store.connection.fetchrow(SLEEP, 5.0))
    await asyncio.sleep(0.2)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert (
        store.connection.lanes._open == 0 and not store.connection.lanes._idle
    )  # not reused mid-cancel
    async with asyncio.timeout(5):
        await commit_simple(store, "t1", "turn-1")  # the pool's only connection, cleaned up
    consistent(store)
    await store.close()


async def test_a_timed_out_statement_is_store_busy_and_the_store_recovers(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema, max_size=1, statement_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(DurabilityError) as caught:
        await store.connection.fetchrow(SLEEP, 5.0)
    assert caught.value.code is ErrorCode.STORE_BUSY and caught.value.retryable
    assert time.monotonic() - started < 1.5
    async with asyncio.timeout(5):
        await commit_simple(store, "t1", "turn-1")
    await store.close()


async def test_waiting_for_a_connection_is_bounded_by_the_statement_budget(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema, max_size=1, statement_timeout=0.3)
    held = store.connection.lanes.connection()  # other work of the store holds its only connection
    await held.__aenter__()
    started = time.monotonic()
    with pytest.raises(DurabilityError) as caught:
        await store.connection.fetchrow("SELECT 1")
    assert caught.value.code is ErrorCode.STORE_BUSY
    assert 0.25 < time.monotonic() - started < 1.0
    consistent(store)
    await held.__aexit__(None, None, None)
    await commit_simple(store, "t1", "turn-1")
    consistent(store)
    await store.close()


async def test_an_exhausted_pool_is_store_busy(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema, max_size=1, statement_timeout=0.3)
    await asyncio.sleep(IDLE_SECONDS * 2.5)  # the lane went back
    held = await store.pool.acquire()  # another user of the pool holds its only connection
    try:
        with pytest.raises(DurabilityError) as caught:
            await commit_simple(store, "t1", "turn-1")
        assert caught.value.code is ErrorCode.STORE_BUSY and caught.value.retryable
    finally:
        await store.pool.release(held)
    await commit_simple(store, "t1", "turn-1")
    await store.close()


async def test_many_turns_share_one_connection_in_turn(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema, max_size=1)
    highest = 0

    async def turn(i: int) -> None:
        nonlocal highest
        await commit_simple(store, f"t{i}", "turn-1")
        highest = max(highest, store.connection.lanes._open)

    async with asyncio.timeout(20):
        await asyncio.gather(*(turn(i) for i in range(30)))
    assert highest == 1
    assert all([await store.get_turn(f"t{i}", "turn-1") for i in range(30)])
    await store.close()


async def test_closing_gives_every_connection_back(dsn: str, schema: str) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=2)
    store = await PostgresDurability.open(pool, schema=schema, setup=True)
    await asyncio.gather(*(commit_simple(store, f"t{i}", "turn-1") for i in range(4)))
    await store.close()
    assert pool.get_idle_size() == pool.get_size()  # the caller's pool has them all back
    await pool.close()


# A random interleaving of statements, slow statements and cancellations at any point.

Step = tuple[str, float]
steps = st.lists(
    st.tuples(st.sampled_from(["fast", "slow", "cancel", "fail"]), st.floats(0, 0.03)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps, size=st.integers(1, 3))
def test_no_interleaving_leaks_or_shares_a_connection(
    dsn: str, plan: list[Step], size: int
) -> None:
    asyncio.run(_interleaving(dsn, plan, size))


async def _interleaving(dsn: str, plan: list[Step], size: int) -> None:
    schema = scratch_schema()
    store = await PostgresDurability.open(
        dsn, schema=schema, setup=True, max_size=size, statement_timeout=2.0
    )
    in_use: set[int] = set()

    async def statement(kind: str) -> None:
        async def call(conn: Any, seconds: float) -> Any:
            assert id(conn) not in in_use, "one connection given to two statements"
            in_use.add(id(conn))
            try:
                if kind == "fail":
                    return await conn.fetchval("SELECT 1 / 0", timeout=seconds)
                pause = 0.05 if kind in ("slow", "cancel") else 0.0
                return await conn.fetchval(SLEEP, pause, timeout=seconds)
            finally:
                in_use.discard(id(conn))

        await store.connection.lanes.run(call, 2.0)

    try:
        tasks = []
        for kind, delay in plan:
            tasks.append(asyncio.ensure_future(statement(kind)))
            await asyncio.sleep(delay)
            if kind == "cancel":
                tasks[-1].cancel()
        async with asyncio.timeout(10):
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for (kind, _), outcome in zip(plan, outcomes, strict=True):
            if kind == "fast" or kind == "slow":
                assert outcome is None, outcome
        consistent(store)
        async with asyncio.timeout(5):
            await commit_simple(store, "t1", "turn-1")  # still usable
        await store.close()
        assert store.connection.lanes._open == 0
    finally:
        await drop_schema(dsn, schema)


# A server that closes the store's connections (a restart, an operator's pg_terminate_backend).


async def terminate_store_backends(dsn: str, application_name: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = $1",
                application_name,
            )
        )
    finally:
        await conn.close()


async def test_idle_connections_the_server_closed_are_dropped_not_used(
    dsn: str, schema: str
) -> None:
    app = f"ik-lanes-{schema}"
    store = await open_store(dsn, schema, max_size=3, application_name=app)
    await asyncio.gather(*(commit_simple(store, f"t{i}", "turn-1") for i in range(6)))
    assert store.connection.lanes._idle
    assert await terminate_store_backends(dsn, app) >= 1
    await asyncio.sleep(0.2)  # the client has seen the connections close
    for i in range(6):  # no turn pays for a connection that was closed while idle
        await commit_simple(store, f"t{i}", "turn-2")
    consistent(store)
    await store.close()


async def test_connections_closed_under_statements_are_never_lost(dsn: str, schema: str) -> None:
    app = f"ik-lanes-{schema}"
    store = await open_store(dsn, schema, max_size=2, application_name=app)
    for _ in range(4):  # more rounds than connections: a lost place would starve the store
        running = [asyncio.ensure_future(store.connection.fetchrow(SLEEP, 5.0)) for _ in range(2)]
        await asyncio.sleep(0.3)
        assert await terminate_store_backends(dsn, app) >= 1
        outcomes = await asyncio.gather(*running, return_exceptions=True)
        assert all(isinstance(o, DurabilityError) and o.retryable for o in outcomes), outcomes
        consistent(store)
    async with asyncio.timeout(5):
        await commit_simple(store, "t1", "turn-1")
    assert store.connection.lanes._open <= 2
    await store.close()
