"""PostgreSQL: a submit that claims for a worker also takes the thread's lease for its turn.

The turn then opens without an acquire of its own; the lease is the one an acquire would take
(fenced, renewed, released by the commit), and one no turn takes up is given back after a
heartbeat interval, so it never holds a thread for its whole ttl.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from intention_kernel.contracts.durability import TurnScope
from intention_kernel.contracts.inbox import RequestState
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.testing.conformance._support import make_result

from .conftest import open_store


async def lease_row(dsn: str, schema: str, thread_id: str) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchrow(
            f"SELECT epoch, owner, expires_at = '-infinity' AS released,"
            f' expires_at > now() AS live FROM "{schema}".leases WHERE thread_id = $1',
            thread_id,
        )
    finally:
        await conn.close()


async def submit_claimed(store: PostgresDurability, thread_id: str, turn_id: str) -> Any:
    request = await store.inbox.submit(
        thread_id, turn_id, text="hello", fingerprint="fp", claimer="w1", claim_ttl=30
    )
    assert (request.state, request.claimed_by) == (RequestState.RUNNING, "w1")
    return request


async def commit(scope: TurnScope) -> None:
    await scope.commit(make_result(scope))


async def test_the_turn_of_a_handed_request_opens_with_the_lease_its_submit_took(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema, lease_ttl=30.0)
    try:
        await store.with_turn("t1", "u0", commit)  # a head to load: the checkpoint comes along
        await submit_claimed(store, "t1", "u1")
        taken = await lease_row(dsn, schema, "t1")
        assert taken["live"] and not taken["released"]
        # Held by the submit for this turn: any other opener would wait for it (30 s ttl).
        async with asyncio.timeout(5):
            await store.with_turn("t1", "u1", commit, request_fingerprint="fp")
        after = await lease_row(dsn, schema, "t1")
        assert after["epoch"] == taken["epoch"] and after["owner"] == taken["owner"]
        assert after["released"]  # the commit released it
        stored = await store.get_turn("t1", "u1")
        assert stored is not None and stored.checkpoint.revision == 2
        request = await store.inbox.get("t1", "u1")
        assert request is not None and request.state is RequestState.DONE
    finally:
        await store.close()


async def test_a_lease_no_turn_takes_up_is_given_back_after_a_heartbeat_interval(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema, lease_ttl=30.0, heartbeat_interval=0.2)
    try:
        await submit_claimed(store, "t1", "u1")
        assert (await lease_row(dsn, schema, "t1"))["live"]
        async with asyncio.timeout(5):
            while not (await lease_row(dsn, schema, "t1"))["released"]:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        # The thread is free at once (not after the 30 s ttl): a direct turn opens.
        async with asyncio.timeout(5):
            await store.with_turn("t1", "u2", commit)
        # The handed request's own turn still runs later, with a lease of its own.
        async with asyncio.timeout(5):
            await store.with_turn("t1", "u1", commit, request_fingerprint="fp")
        request = await store.inbox.get("t1", "u1")
        assert request is not None and request.state is RequestState.DONE
    finally:
        await store.close()


async def test_closing_the_store_gives_back_the_leases_no_turn_took_up(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema, lease_ttl=30.0)
    await submit_claimed(store, "t1", "u1")
    await store.close()
    assert (await lease_row(dsn, schema, "t1"))["released"]


async def test_submits_that_claim_together_go_as_one_statement_each_with_its_outcome(
    dsn: str, schema: str
) -> None:
    """Submits that queue while one is in flight share a statement; each still gets its own
    request, claim and lease (a new thread), a pending request (a thread with one open) or
    the stored request (an id taken before)."""
    store = await open_store(dsn, schema, lease_ttl=30.0)
    try:
        busy = await store.inbox.submit("busy", "u1", text="hello", fingerprint="fp")
        taken = await store.inbox.submit("taken", "u1", text="hello", fingerprint="fp")
        await store.inbox.submit("taken", "u2", text="hello", fingerprint="fp")  # holds it
        keys = [(f"t{n}", "u1") for n in range(8)] + [("busy", "u2"), ("taken", "u1")]
        submitted = await asyncio.gather(
            *(
                store.inbox.submit(
                    thread_id, turn_id, text="hello", fingerprint="fp", claimer="w1", claim_ttl=30
                )
                for thread_id, turn_id in keys
            )
        )
        assert [r.key for r in submitted] == keys
        assert max(store.submit_groups) > 1, store.submit_groups  # some went together
        for request in submitted[:8]:
            assert (request.state, request.claimed_by) == (RequestState.RUNNING, "w1")
            lease = await lease_row(dsn, schema, request.thread_id)
            assert lease["live"] and not lease["released"], request.thread_id
        assert submitted[8].state is RequestState.PENDING  # behind busy/u1
        assert submitted[8].position > busy.position
        assert await lease_row(dsn, schema, "busy") is None  # not claimed: no lease taken
        assert (submitted[9].position, submitted[9].state) == (taken.position, taken.state)
        # Each handed turn opens with the lease its submit took (30 s ttl: no wait).
        async with asyncio.timeout(5):
            await asyncio.gather(
                *(
                    store.with_turn(r.thread_id, r.turn_id, commit, request_fingerprint="fp")
                    for r in submitted[:8]
                )
            )
        for request in submitted[:8]:
            stored = await store.inbox.get(request.thread_id, request.turn_id)
            assert stored is not None and stored.state is RequestState.DONE
    finally:
        await store.close()
