"""PostgreSQL adapter under cancellation, stuck statements and late writes (real server).

Each test is bounded in time: a hang of the defect under test ends as a failure, not a stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from intention_kernel.contracts import TurnScope
from intention_kernel.contracts.errors import (
    ConfigurationError,
    DurabilityError,
    ErrorCode,
    LeaseLostError,
    TurnConflictError,
)
from intention_kernel.contracts.events import KernelEvent
from intention_kernel.contracts.turns import DurableTurnResult
from intention_kernel.durability._documents import encode_model
from intention_kernel.durability._ledger import start_effect
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.durability.postgres._sql import Statements
from intention_kernel.durability.storage import TurnCommit
from intention_kernel.testing.conformance import (
    Provider,
    commit_simple,
    effect,
    make_events,
    make_result,
    turn_storage,
)

from .conftest import open_store

TIMED_OUT = "a database statement did not finish in time"


def turn_commit(
    store: PostgresDurability, result: DurableTurnResult, events: Sequence[KernelEvent] = ()
) -> TurnCommit:
    """What ``scope.commit`` hands the adapter, built by hand to send it with an old token."""
    limits = store.json_limits
    return TurnCommit(
        result=result,
        result_json=encode_model(result, limits=limits, what="turn result"),
        events=list(events),
        events_json=[encode_model(e, limits=limits, what="outbox event") for e in events],
        fingerprint=None,
        loaded_revision=result.checkpoint.revision - 1,
    )


async def lease_released(dsn: str, schema: str, thread_id: str) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        return bool(
            await conn.fetchval(
                f"SELECT expires_at = '-infinity' FROM \"{schema}\".leases WHERE thread_id = $1",
                thread_id,
            )
        )
    finally:
        await conn.close()


# 1. A renewal that cannot finish (exhausted pool, row lock) is a lost lease, within the TTL.


@pytest.mark.parametrize("blocker", ["exhausted_pool", "row_lock"])
async def test_a_renewal_that_cannot_finish_loses_the_lease_within_the_ttl(
    dsn: str, schema: str, blocker: str
) -> None:
    ttl = 0.5
    store = await open_store(dsn, schema, lease_ttl=ttl, max_size=1)
    side = await asyncpg.connect(dsn)
    lock = side.transaction()
    taken: list[Any] = []

    async def parked(scope: TurnScope) -> None:
        if blocker == "exhausted_pool":  # the store's only connection, held by other work
            held = store.connection.lanes.connection()
            await held.__aenter__()
            taken.append(held)
        else:
            await lock.start()
            await side.execute(
                f'SELECT 1 FROM "{schema}".leases WHERE thread_id = $1 FOR UPDATE', "t1"
            )
        await asyncio.sleep(10)  # only the heartbeat can end this turn

    started = time.monotonic()
    turn = asyncio.create_task(store.with_turn("t1", "turn-1", parked))
    ended: list[float] = []
    turn.add_done_callback(lambda _: ended.append(time.monotonic()))
    try:
        await asyncio.wait({turn}, timeout=3)
        assert ended, "the turn did not end: the lost lease went unnoticed"
        with pytest.raises(LeaseLostError):
            await turn
    finally:
        for held in taken:
            await held.__aexit__(None, None, None)
        await side.close()
        if not turn.done():
            turn.cancel()
            await asyncio.wait({turn}, timeout=5)
    elapsed = ended[0] - started
    assert elapsed < ttl + 0.35, elapsed  # detected before the lease could expire
    assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]
    await commit_simple(store, "t1", "turn-1")  # the store stays usable
    await store.close()


# 2. A cancel of the turn while it stops the heartbeat and releases is never swallowed (a
# turn that ends without committing: a commit releases the lease itself).


async def test_a_cancel_while_the_turn_ends_its_lease_always_propagates(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema, lease_ttl=1.0, heartbeat_interval=0.005)
    delivered = 0
    async with asyncio.timeout(20):
        for run in range(40):
            committed = asyncio.Event()

            async def operation(scope: TurnScope, committed: asyncio.Event = committed) -> None:
                await asyncio.sleep(0.03)  # the heartbeat task is renewing now
                committed.set()  # and the turn ends without a commit

            turn = asyncio.create_task(store.with_turn("t1", f"turn-{run}", operation))
            await committed.wait()  # the turn now leaves its scope and stops the heartbeat
            for _ in range(run % 4):
                await asyncio.sleep(0)
            if turn.cancel():
                with pytest.raises(asyncio.CancelledError):
                    await turn
                delivered += 1
            else:
                await turn
    assert delivered > 0
    other = await open_store(dsn, schema, lock_timeout=0.9)
    await commit_simple(other, "t1", "after")  # every lease was released all the same
    await other.close()
    await store.close()


# 3. A cancel while the lease is being acquired leaves no lease held.


async def test_a_cancel_during_the_acquire_leaves_no_lease_behind(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema, lease_ttl=30)

    async def operation(scope: TurnScope) -> None:
        await scope.commit(make_result(scope))

    async with asyncio.timeout(30):
        for run in range(160):
            turn = asyncio.create_task(store.with_turn("t1", f"turn-{run}", operation))
            for _ in range(run % 80):  # cancel at every event-loop iteration of the acquire
                await asyncio.sleep(0)
            turn.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await turn
    other = await open_store(dsn, schema, lock_timeout=2)
    started = time.monotonic()
    await commit_simple(other, "t1", "after")  # no orphan lease: well under the 30 s TTL
    assert time.monotonic() - started < 1.5
    await other.close()
    await store.close()


# 4. A released lease fences late writes; the release waits for a write still in flight.


async def test_a_released_lease_refuses_a_late_write(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema)
    identity = effect("k1")
    async with store.turn("t1", "turn-1") as scope:
        lease = scope._held()
        result = make_result(scope)
        receipt = start_effect(
            None, identity, thread_id="t1", turn_id="turn-1", now=datetime.now(UTC)
        ).receipt
    assert await lease_released(dsn, schema, "t1")
    late = turn_commit(store, result)
    with pytest.raises(LeaseLostError):
        await turn_storage(store).commit(lease, late)
    with pytest.raises(LeaseLostError):
        await turn_storage(store)._effects._write_receipt(lease, receipt, None)
    with pytest.raises(LeaseLostError):
        await turn_storage(store).begin_effect(lease, "turn-1", identity, datetime.now(UTC))
    assert await store.get_turn("t1", "turn-1") is None
    assert await store.get_receipt("t1", identity.idempotency_key) is None

    other = await open_store(dsn, schema)
    taken, _, _ = await commit_simple(other, "t1", "turn-2")  # a takeover in between
    with pytest.raises(LeaseLostError):
        await turn_storage(store).commit(lease, late)
    head = await store.load_checkpoint("t1")
    assert head == taken.checkpoint  # never overwritten by the old token
    assert await store.get_turn("t1", "turn-1") is None
    await other.close()
    await store.close()


async def test_the_release_waits_for_a_write_still_in_flight(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema, min_size=1, max_size=2)
    identity = effect("k1")
    async with asyncio.timeout(5):
        async with store.turn("t1", "turn-1") as scope:
            receipt = start_effect(
                None, identity, thread_id="t1", turn_id="turn-1", now=datetime.now(UTC)
            ).receipt
            busy = (
                store.connection.lanes.connection()
            )  # the open connection: the write opens another
            await busy.__aenter__()
            lease = scope._held()
            write = asyncio.ensure_future(
                turn_storage(store)._effects._write_receipt(lease, receipt, None)
            )
            await asyncio.sleep(0)  # the write is on its way (connecting)
            await busy.__aexit__(None, None, None)  # the release could take this one at once
        assert write.done()  # the turn ended only after its write: the release came last
        assert await write is True  # and the write was not refused by its own release
    assert await lease_released(dsn, schema, "t1")
    stored = await store.get_receipt("t1", identity.idempotency_key)
    assert stored is not None and stored.id == receipt.id
    await store.close()


# 5. A statement blocked on a row lock ends as a typed retryable error.


@pytest.mark.parametrize("table", ["leases", "receipts", "heads"])
async def test_a_statement_blocked_on_a_row_lock_is_a_retryable_error(
    dsn: str, schema: str, table: str
) -> None:
    store = await open_store(dsn, schema, lock_timeout=1)
    await commit_simple(store, "t1", "turn-1")
    identity = effect("k1")
    side = await asyncpg.connect(dsn)
    lock = side.transaction()
    await lock.start()
    if table == "receipts":  # an uncommitted row for the key: the `prepared` write waits
        await side.execute(
            f'INSERT INTO "{schema}".receipts VALUES ($1, $2, $3, $4, now(), $5)',
            "t1",
            identity.idempotency_key,
            "rcpt_side",
            "prepared",
            "{}",
        )
    else:  # an operator session left open on the row
        await side.execute(
            f'SELECT 1 FROM "{schema}".{table} WHERE thread_id = $1 FOR UPDATE', "t1"
        )
    provider = Provider()
    effects = [(identity, provider.returning(1))] if table == "receipts" else None
    started = time.monotonic()
    turn = asyncio.create_task(commit_simple(store, "t1", "turn-2", effects=effects))
    try:
        await asyncio.wait({turn}, timeout=5)
        elapsed = time.monotonic() - started
        assert turn.done(), "the turn hangs on the row lock"
    finally:
        await lock.rollback()
        await side.close()
        await asyncio.wait({turn}, timeout=5)
    with pytest.raises(DurabilityError) as caught:
        await turn
    assert caught.value.code == ErrorCode.STORE_BUSY and caught.value.retryable
    assert caught.value.message == TIMED_OUT
    assert elapsed < 3.5, elapsed
    assert provider.total() == 0
    await commit_simple(store, "t1", "turn-2")  # usable again once the lock is gone
    await store.close()


@pytest.mark.parametrize("value", [0, -1, 3601, True, "5"])
def test_a_bad_statement_timeout_is_refused(value: Any) -> None:
    with pytest.raises(ConfigurationError):
        PostgresDurability(object(), statement_timeout=value)


# 6. A commit sent again finds a typed conflict; the engine then recognises its own commit.


async def test_a_repeated_commit_is_a_typed_conflict(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema)
    await commit_simple(store, "t1", "turn-1")
    async with store.turn("t1", "turn-2") as scope:
        lease = scope._held()
        commit = turn_commit(store, make_result(scope))
        await turn_storage(store).commit(lease, commit)
        assert lease.released  # the commit released the lease in its own statement
        with pytest.raises(TurnConflictError) as caught:
            # Fenced by that release; the lease was released by this very commit and the turn
            # is in: the engine compares the stored result with its own.
            await turn_storage(store).commit(lease, commit)
        assert caught.value.code == ErrorCode.TURN_ALREADY_COMMITTED
    conn = await asyncpg.connect(dsn)
    try:  # set the head back behind the adapter: the turn row itself refuses the repeat
        await conn.execute(
            f"UPDATE \"{schema}\".heads SET revision = 1, turn_id = 'turn-1' WHERE thread_id = 't1'"
        )
        async with store.turn("t1", "turn-3") as scope:
            with pytest.raises(TurnConflictError) as caught:
                await turn_storage(store).commit(scope._held(), commit)
            assert caught.value.code == ErrorCode.TURN_ALREADY_COMMITTED
            other = turn_commit(store, commit.result.model_copy(update={"turn_id": "turn-3"}))
            with pytest.raises(TurnConflictError) as caught:
                await turn_storage(store).commit(scope._held(), other)  # the revision is taken
            assert caught.value.code == ErrorCode.CHECKPOINT_REVISION_CONFLICT
    finally:
        await conn.close()
    await store.close()


class LostAnswer:
    """The store's real connections, except that the first commit statement runs to its COMMIT
    on the server and then its connection is closed before the client reads the answer."""

    def __init__(self, lanes: Any, commit_sql: str, side: Any, schema: str) -> None:
        self.lanes, self.commit_sql, self.side, self.schema = lanes, commit_sql, side, schema
        self.armed = True

    async def run(self, call: Any, seconds: float) -> Any:
        return await self.lanes.run(lambda conn, t: call(_Answering(conn, self), t), seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lanes, name)

    async def lose(self, conn: Any, sql: str, args: tuple[Any, ...]) -> Any:
        self.armed = False
        statement = await conn.prepare(sql)  # executing it is then one message
        conn._con._transport.pause_reading()  # the answer stays unread
        answer = asyncio.ensure_future(statement.fetchrow(*args))
        for _ in range(400):  # until the commit is visible: it did commit
            if await self.side.fetchval(
                f'SELECT count(*) FROM "{self.schema}".turns WHERE thread_id = $1 AND turn_id = $2',
                args[0],
                args[3],
            ):
                break
            await asyncio.sleep(0.005)
        conn.terminate()
        return await answer  # raises: the connection was closed mid-operation


class _Answering:
    """One connection of ``LostAnswer``."""

    def __init__(self, conn: Any, lost: LostAnswer) -> None:
        self.conn, self.lost = conn, lost

    async def fetchrow(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        if self.lost.armed and sql == self.lost.commit_sql:
            return await self.lost.lose(self.conn, sql, args)
        return await self.conn.fetchrow(sql, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


async def test_a_commit_retried_after_an_ambiguous_commit_succeeds(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema)
    side = await asyncpg.connect(dsn)
    store.connection.lanes = LostAnswer(
        store.connection.lanes, Statements.render(store.schema).commit, side, schema
    )  # type: ignore[assignment]

    async def operation(scope: TurnScope) -> DurableTurnResult:
        result = make_result(scope)
        events = make_events(scope)
        with pytest.raises(DurabilityError) as caught:
            await scope.commit(result, events)
        assert caught.value.retryable  # ambiguous: it did commit, the answer was lost
        await scope.commit(result, events)  # the same result again, in the same scope
        return result

    try:
        async with asyncio.timeout(10):
            result = await store.with_turn("t1", "turn-1", operation)
        assert await store.get_turn("t1", "turn-1") == result
        assert len(await store.read_outbox(thread_id="t1")) == 3  # committed once
    finally:
        await side.close()
        await store.close()
