"""PostgreSQL group acquire: turn opens that queue while one is in flight go as one statement,
each thread with its own outcome (a lease taken, a committed turn replayed, a lease held by
another left alone), and a group whose answer is lost takes nothing any turn keeps."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from asyncpg.connection import Connection

from intention_kernel.contracts import DurabilityError, DurableTurnResult, TurnScope
from intention_kernel.contracts.errors import ErrorCode
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.testing.conformance import make_events, make_result

from .conftest import open_store
from .pg_locks import cancel_queued_then_unlock, lock_lease, queued, unlock, waiting_on_lock
from .pg_sessions import read_only_store

THREADS = [f"a{n}" for n in range(8)]


class Opens:
    """Turns that record whether they ran (``ran``) and commit at once; a replayed turn
    returns its stored result without running."""

    def __init__(self) -> None:
        self.ran: set[str] = set()
        self.results: dict[str, DurableTurnResult] = {}

    def operation(self, thread_id: str) -> Callable[[TurnScope], Any]:
        async def run(scope: TurnScope) -> DurableTurnResult:
            if scope.prior_result is not None:
                return scope.prior_result
            self.ran.add(thread_id)
            result = make_result(scope, {"thread": thread_id})
            await scope.commit(result, make_events(scope))
            self.results[thread_id] = result
            return result

        return run


async def _first_turns(store: PostgresDurability) -> dict[str, DurableTurnResult]:
    """A committed ``turn-0`` on every thread (so every thread has a lease row)."""
    opens = Opens()
    for thread_id in THREADS:
        await store.with_turn(thread_id, "turn-0", opens.operation(thread_id))
    return opens.results


async def _held(store: PostgresDurability, schema: str, threads: list[str]) -> int:
    """How many of these threads' leases are held now."""
    held: int = await store.pool.fetchval(
        f'SELECT count(*) FROM "{schema}".leases'
        " WHERE thread_id = ANY($1::text[]) AND expires_at > clock_timestamp()",
        threads,
    )
    return held


async def _queue_behind_first(
    store: PostgresDurability, dsn: str, schema: str, opens: Opens, turn_ids: dict[str, str]
) -> tuple[list[asyncio.Task[Any]], Any]:
    """The first thread's open waits in flight on its held lease row; the others queue behind
    it. Returns the turns (in ``THREADS`` order) and the connection holding the row."""
    blocker = await lock_lease(dsn, schema, THREADS[0])
    tasks = [
        asyncio.create_task(
            store.with_turn(THREADS[0], turn_ids[THREADS[0]], opens.operation(THREADS[0]))
        )
    ]
    await waiting_on_lock(dsn, schema)
    tasks += [
        asyncio.create_task(store.with_turn(t, turn_ids[t], opens.operation(t)))
        for t in THREADS[1:]
    ]
    await queued(store.roles.turns.acquires, len(THREADS) - 1)  # type: ignore[attr-defined]
    return tasks, blocker


async def test_opens_that_queue_behind_one_go_as_one_statement_each_with_its_own_outcome(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema, lease_ttl=30.0, lock_timeout=20.0)
    other = await open_store(dsn, schema, lease_ttl=30.0)
    try:
        first = await _first_turns(store)
        # Another store holds a2's lease until told to let go.
        holding, let_go = asyncio.Event(), asyncio.Event()

        async def hold(scope: TurnScope) -> None:
            holding.set()
            await let_go.wait()

        holder = asyncio.create_task(other.with_turn(THREADS[2], "elsewhere", hold))
        await asyncio.wait_for(holding.wait(), 10)
        opens = Opens()
        turn_ids = dict.fromkeys(THREADS, "turn-1") | {THREADS[1]: "turn-0"}  # a1 replays
        tasks, blocker = await _queue_behind_first(store, dsn, schema, opens, turn_ids)
        await unlock(blocker)
        by_thread = dict(zip(THREADS, tasks, strict=True))
        others = [by_thread[t] for t in THREADS if t != THREADS[2]]
        await asyncio.wait_for(asyncio.gather(*others), 30)

        assert store.acquire_groups[len(THREADS) - 1] == 1, store.acquire_groups
        assert by_thread[THREADS[1]].result() == first[THREADS[1]]  # replayed, not run
        assert THREADS[1] not in opens.ran
        assert await _held(store, schema, [THREADS[1]]) == 0  # a replay takes no lease
        assert not by_thread[THREADS[2]].done()  # its lease is another's: it waits
        for thread_id in THREADS[3:] + THREADS[:1]:
            assert by_thread[thread_id].result() == opens.results[thread_id]

        let_go.set()
        await asyncio.wait_for(holder, 10)
        assert await asyncio.wait_for(by_thread[THREADS[2]], 30) == opens.results[THREADS[2]]
    finally:
        await other.close()
        await store.close()


async def test_a_group_whose_connection_is_lost_fails_every_open_and_keeps_no_lease(
    dsn: str, schema: str
) -> None:
    """The group waits on a3's lease row; its backend is terminated: every turn of the group
    gets the store's retryable error, none ran, no lease is left held, and each opens again."""
    store = await open_store(dsn, schema, lease_ttl=30.0)
    try:
        await _first_turns(store)
        opens = Opens()
        turn_ids = dict.fromkeys(THREADS, "turn-1")
        tasks, first = await _queue_behind_first(store, dsn, schema, opens, turn_ids)
        blocker = await lock_lease(dsn, schema, THREADS[3])
        await unlock(first)  # a0 opens and commits; the group of a1..a7 then waits on a3
        await asyncio.wait_for(tasks[0], 30)
        group = await waiting_on_lock(dsn, schema)
        await blocker.execute("SELECT pg_terminate_backend($1)", group)
        await unlock(blocker)
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks[1:], return_exceptions=True), 30)

        assert all(isinstance(o, DurabilityError) and o.retryable for o in outcomes), outcomes
        assert opens.ran == {THREADS[0]}
        assert await _held(store, schema, THREADS[1:]) == 0
        again = await asyncio.wait_for(
            asyncio.gather(*(store.with_turn(t, "turn-1", opens.operation(t)) for t in THREADS)),
            30,
        )
        assert again == [opens.results[t] for t in THREADS]
    finally:
        await store.close()


async def test_a_group_refused_by_a_read_only_session_replays_each_committed_turn(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a pooler that does not report the session read-only, a group of opens is
    refused by the server as a whole: each is then sent alone, so every committed turn still
    replays (with the plain SELECT) and only the new turn is refused."""
    writer = await open_store(dsn, schema)
    try:
        first = await _first_turns(writer)
    finally:
        await writer.close()
    store, pool = await read_only_store(dsn, schema)
    monkeypatch.setattr(Connection, "get_settings", lambda self: object())
    opens = Opens()
    try:
        outcomes = await asyncio.wait_for(
            asyncio.gather(
                *(store.with_turn(t, "turn-0", opens.operation(t)) for t in THREADS),
                store.with_turn("new", "turn-0", opens.operation("new")),
                return_exceptions=True,
            ),
            30,
        )
        assert outcomes[:-1] == [first[t] for t in THREADS]
        refused = outcomes[-1]
        assert isinstance(refused, DurabilityError)
        assert refused.code is ErrorCode.STORE_READ_ONLY
        assert not opens.ran
        # The first open alone, then the group refused and its eight opens sent one by one.
        assert store.acquire_groups == Counter({1: len(THREADS) + 1}), store.acquire_groups
    finally:
        await store.close()
        await pool.close()


async def test_an_open_cancelled_while_queued_gives_its_lease_back_after_the_group(
    dsn: str, schema: str
) -> None:
    """a4 is cancelled while its open waits in the queue: the group still takes a4's lease
    with the others; a4 then gives it back and ends cancelled, without running, and the next
    turn of a4 opens at once (not after the lease's 30 s)."""
    store = await open_store(dsn, schema, lease_ttl=30.0, lock_timeout=5.0)
    try:
        await _first_turns(store)
        opens = Opens()
        tasks, blocker = await _queue_behind_first(
            store, dsn, schema, opens, dict.fromkeys(THREADS, "turn-1")
        )
        outcomes = await cancel_queued_then_unlock(tasks, 4, blocker)

        assert isinstance(outcomes[4], asyncio.CancelledError)
        assert store.acquire_groups[len(THREADS) - 1] == 1  # a4's open went with the others
        assert THREADS[4] not in opens.ran
        assert await _held(store, schema, [THREADS[4]]) == 0
        again = await asyncio.wait_for(
            store.with_turn(THREADS[4], "turn-1", opens.operation(THREADS[4])), 5
        )
        assert again == opens.results[THREADS[4]]
    finally:
        await store.close()
