"""PostgreSQL group commit: commits that queue while one is in flight go as one statement, each
row with its own fence and compare-and-set (a lost lease or a conflict fails only its turn)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import asyncpg

from intention_kernel.contracts import (
    DurabilityError,
    DurableTurnResult,
    LeaseLostError,
    TurnConflictError,
    TurnScope,
)
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.testing.conformance import make_events, make_result

from .conftest import open_store
from .pg_locks import cancel_queued_then_unlock, lock_lease, queued, unlock, waiting_on_lock

THREADS = [f"t{n}" for n in range(8)]


class Turns:
    """Eight turns of eight threads that reach their commits together, the first (``t0``)
    alone and waiting for a held lease row, the others queued behind it."""

    def __init__(self, store: PostgresDurability, threads: list[str] = THREADS) -> None:
        self.store = store
        self.results: dict[str, DurableTurnResult] = {}
        self.built: dict[str, DurableTurnResult] = {}
        """Each turn's result as it went to its commit (a cancelled turn has no ``results``)."""
        self.ready = asyncio.Barrier(len(threads) + 1)
        self.first_sent = asyncio.Event()
        self.held = asyncio.Event()
        """Set once t0's lease row is held: only then may t0 commit."""
        self.sent = 0

    async def queued(self, count: int) -> None:
        """Until ``count`` commits wait in the store's group commit queue (bounded)."""
        await queued(self.store.roles.turns.group, count)  # type: ignore[attr-defined]

    def operation(self, thread_id: str) -> Callable[[TurnScope], Any]:
        async def run(scope: TurnScope) -> DurableTurnResult:
            result = make_result(scope, {"thread": thread_id})
            await self.ready.wait()
            if thread_id != THREADS[0]:
                await self.first_sent.wait()  # t0 goes first and alone
            else:
                await self.held.wait()
                self.first_sent.set()
            self.built[thread_id] = result
            await scope.commit(result, make_events(scope))
            self.results[thread_id] = result
            return result

        return run

    async def queue_behind_first(
        self, dsn: str, schema: str
    ) -> tuple[list[asyncio.Task[Any]], asyncpg.Connection]:
        """Start the turns; once each holds its lease, hold t0's lease row so its commit waits
        in flight, alone, and the others queue behind it. Returns the turns and the connection
        holding the row (``unlock`` it to let the commits go)."""
        tasks = self.start()
        await self.ready.wait()
        first = await lock_lease(dsn, schema, THREADS[0])
        self.held.set()
        await self.first_sent.wait()
        await waiting_on_lock(dsn, schema)
        await self.queued(len(THREADS) - 1)
        return tasks, first

    def start(self) -> list[asyncio.Task[Any]]:
        return [
            asyncio.create_task(self.store.with_turn(t, "turn-1", self.operation(t)))
            for t in THREADS
        ]


async def _replayed(store: PostgresDurability, thread_id: str) -> DurableTurnResult | None:
    async def replay(scope: TurnScope) -> DurableTurnResult | None:
        return scope.prior_result

    result: DurableTurnResult | None = await store.with_turn(thread_id, "turn-1", replay)
    return result


async def test_commits_that_queue_behind_one_go_as_one_statement(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema, lease_ttl=30.0)
    try:
        turns = Turns(store)
        tasks, first = await turns.queue_behind_first(dsn, schema)
        await unlock(first)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)

        assert store.commit_groups == Counter({1: 1, len(THREADS) - 1: 1})
        for thread_id in THREADS:
            assert await _replayed(store, thread_id) == turns.results[thread_id]
    finally:
        await store.close()


async def test_a_lost_lease_or_a_conflict_in_a_group_fails_only_its_own_turn(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema, lease_ttl=30.0)
    try:
        turns = Turns(store)
        tasks, first = await turns.queue_behind_first(dsn, schema)
        # While t1..t7 wait in the queue: another holder takes t1, another turn moves t2.
        await store.pool.execute(
            f'UPDATE "{schema}".leases SET epoch = epoch + 1 WHERE thread_id = $1', "t1"
        )
        await store.pool.execute(
            f'INSERT INTO "{schema}".heads (thread_id, revision, turn_id) VALUES ($1, 5, $2)',
            "t2",
            "elsewhere",
        )
        await unlock(first)
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)

        by_thread = dict(zip(THREADS, outcomes, strict=True))
        assert isinstance(by_thread["t1"], LeaseLostError)
        assert isinstance(by_thread["t2"], TurnConflictError)
        for thread_id in (t for t in THREADS if t not in ("t1", "t2")):
            assert by_thread[thread_id] == turns.results[thread_id]
            assert await _replayed(store, thread_id) == turns.results[thread_id]
        assert store.commit_groups[len(THREADS) - 1] == 1
    finally:
        await store.close()


async def test_a_group_whose_connection_is_lost_fails_every_turn_and_writes_none(
    dsn: str, schema: str
) -> None:
    """The group's statement waits on t3's lease row; its backend is terminated: every turn
    of the group gets the store's error and none is stored. Delivered again, each commits."""
    store = await open_store(dsn, schema, lease_ttl=30.0)
    try:
        turns = Turns(store)
        tasks, first = await turns.queue_behind_first(dsn, schema)
        blocker = await lock_lease(dsn, schema, THREADS[3])
        await unlock(first)  # t0 commits; the group of t1..t7 then waits on t3's row
        assert await tasks[0] == turns.results[THREADS[0]]
        group = await waiting_on_lock(dsn, schema)
        await blocker.execute("SELECT pg_terminate_backend($1)", group)
        await unlock(blocker)  # before the turns end: their releases need t3's row too
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks[1:], return_exceptions=True), 60)

        assert all(isinstance(o, DurabilityError) and o.retryable for o in outcomes), outcomes
        for thread_id in THREADS[1:]:
            assert await _replayed(store, thread_id) is None  # nothing of the group landed
        again = Turns(store, THREADS[1:])
        again.held.set()
        again.first_sent.set()
        retried = [
            asyncio.create_task(store.with_turn(t, "turn-1", again.operation(t)))
            for t in THREADS[1:]
        ]
        await again.ready.wait()
        await asyncio.wait_for(asyncio.gather(*retried), 60)
        for thread_id in THREADS[1:]:
            assert await _replayed(store, thread_id) == again.results[thread_id]
    finally:
        await store.close()


async def test_leases_due_together_renew_in_one_statement_and_a_lost_one_alone_is_lost(
    dsn: str, schema: str
) -> None:
    """Twenty turns hold their leases through several renewals (ttl 0.9 s, a renewal every
    0.3 s): the renewals go a handful of statements per round, not one per lease; one lease
    taken over meanwhile is lost (its turn cancelled with LeaseLostError), the others commit."""
    store = await open_store(dsn, schema, lease_ttl=0.9)
    threads = [f"r{n}" for n in range(20)]
    held = asyncio.Barrier(len(threads) + 1)
    results: dict[str, DurableTurnResult] = {}

    def operation(thread_id: str) -> Callable[[TurnScope], Any]:
        async def run(scope: TurnScope) -> DurableTurnResult:
            await held.wait()
            await asyncio.sleep(1.5)  # five renewals are due meanwhile
            result = make_result(scope, {"thread": thread_id})
            await scope.commit(result, make_events(scope))
            results[thread_id] = result
            return result

        return run

    try:
        renewals = store.roles.turns.renewals  # type: ignore[attr-defined]
        tasks = [asyncio.create_task(store.with_turn(t, "turn-1", operation(t))) for t in threads]
        await held.wait()
        await store.pool.execute(
            f'UPDATE "{schema}".leases SET epoch = epoch + 1 WHERE thread_id = $1', "r7"
        )
        ended = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
        outcomes = dict(zip(threads, ended, strict=True))

        assert isinstance(outcomes.pop("r7"), LeaseLostError)
        assert all(outcomes[t] == results[t] for t in outcomes)
        # Each lease was renewed about five times: 100 renewals, in rounds of shared statements.
        assert 3 <= renewals.statements <= 15, renewals.statements
    finally:
        await store.close()


async def test_a_turn_cancelled_while_its_commit_is_queued_learns_the_outcome_first(
    dsn: str, schema: str
) -> None:
    """t3 is cancelled while its commit waits in the queue: the cancellation does not take it
    out of the group; once the group committed, t3 ends cancelled and its turn is stored."""
    store = await open_store(dsn, schema, lease_ttl=30.0)
    try:
        turns = Turns(store)
        tasks, first = await turns.queue_behind_first(dsn, schema)
        outcomes = await cancel_queued_then_unlock(tasks, 3, first)

        assert isinstance(outcomes[3], asyncio.CancelledError)
        assert store.commit_groups[len(THREADS) - 1] == 1  # t3 went with the others
        for thread_id in THREADS:  # t3 included: its commit landed before its cancel ended it
            assert await _replayed(store, thread_id) == turns.built[thread_id]
    finally:
        await store.close()
