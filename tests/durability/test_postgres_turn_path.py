"""The PostgreSQL turn path: the commit releases the lease, the heartbeat stops at commit,
replay is a plain read on a read-only session, the committed-text cache is bounded by bytes,
and migration 4 drops the outbox index that repeated another."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from asyncpg.connection import Connection

from intention_kernel.contracts import TurnScope
from intention_kernel.contracts.errors import (
    ConfigurationError,
    DurabilityError,
    ErrorCode,
    TurnConflictError,
)
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.durability.postgres._lease import PgLease
from intention_kernel.durability.postgres._schema import MIGRATIONS
from intention_kernel.testing.conformance import (
    commit_simple,
    make_events,
    make_result,
    turn_storage,
)

from ._statements import recorded
from .conftest import open_store
from .pg_sessions import read_only_store


async def lease_row(store: PostgresDurability, thread_id: str) -> Any:
    return await store.pool.fetchrow(
        f"SELECT epoch, owner, expires_at = '-infinity' AS released"
        f' FROM "{store.schema}".leases WHERE thread_id = $1',
        thread_id,
    )


async def test_a_late_renewal_cannot_take_back_a_released_lease(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema)
    held: list[PgLease] = []

    async def operation(scope: TurnScope) -> None:
        held.append(scope._held())  # type: ignore[attr-defined]
        await scope.commit(make_result(scope), make_events(scope))

    await store.with_turn("t1", "turn-1", operation)
    lease = held[0]
    assert lease.released and (await lease_row(store, "t1"))["released"]
    assert await turn_storage(store)._renew(lease) is False  # a renewal sent late finds it released
    assert (await lease_row(store, "t1"))["released"]
    await store.close()


async def test_renewals_racing_the_commit_never_fail_a_committed_turn(
    dsn: str, schema: str
) -> None:
    """A renewal is nearly always in flight; one that met the released lease would be taken
    for a loss and fail a turn that committed. The heartbeat stops when the commit is sent."""
    store = await open_store(dsn, schema, lease_ttl=2.0, heartbeat_interval=0.002)

    async def operation(scope: TurnScope) -> None:
        await asyncio.sleep(0.01)  # renewals run meanwhile
        await scope.commit(make_result(scope), make_events(scope))

    async with asyncio.timeout(60):
        for n in range(60):
            await store.with_turn("t1", f"turn-{n}", operation)
            assert (await lease_row(store, "t1"))["released"]
    assert len(await store.list_turns("t1", limit=100)) == 60
    await store.close()


async def test_a_commit_that_does_not_land_keeps_the_lease_and_renews_it(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema, lease_ttl=1.0, heartbeat_interval=0.05)
    await commit_simple(store, "t1", "turn-1")
    side = await asyncpg.connect(dsn)
    try:

        async def operation(scope: TurnScope) -> None:
            lease: PgLease = scope._held()  # type: ignore[attr-defined]
            await side.execute(
                f'UPDATE "{schema}".heads SET revision = 7 WHERE thread_id = $1', "t1"
            )
            with pytest.raises(TurnConflictError) as caught:
                await scope.commit(make_result(scope))
            assert caught.value.code is ErrorCode.CHECKPOINT_REVISION_CONFLICT
            assert not lease.released
            before = await lease_row(store, "t1")
            assert not before["released"] and before["epoch"] == lease.epoch
            expires = f"SELECT expires_at FROM \"{schema}\".leases WHERE thread_id = 't1'"
            first = await side.fetchval(expires)
            await asyncio.sleep(0.3)  # the heartbeat was resumed: it renews again
            assert await side.fetchval(expires) > first

        await store.with_turn("t1", "turn-2", operation)
        assert (await lease_row(store, "t1"))["released"]  # the turn's end released it
    finally:
        await side.close()
    await store.close()


async def test_a_commit_whose_answer_was_lost_is_recognised_after_its_own_release(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema)

    async def operation(scope: TurnScope) -> None:
        result, events = make_result(scope), make_events(scope)
        lease: PgLease = scope._held()  # type: ignore[attr-defined]
        await scope.commit(result, events)
        scope._committed = False  # type: ignore[attr-defined]  # as after a lost answer
        scope._maybe_committed = True  # type: ignore[attr-defined]
        await scope.commit(result, events)  # fenced by its own release, then recognised
        assert lease.released

    await store.with_turn("t1", "turn-1", operation)
    assert len(await store.read_outbox(thread_id="t1")) == len(make_events_count())
    await store.close()


def make_events_count() -> list[int]:
    """One entry per event ``make_events`` builds by default."""
    return [0] * 3


# -------------------------------------------------------------------- replay, read-only


async def test_replay_is_a_plain_select_on_a_read_only_session(dsn: str, schema: str) -> None:
    writer = await open_store(dsn, schema)
    result, _, _ = await commit_simple(writer, "t1", "turn-1")
    await writer.close()
    store, pool = await read_only_store(dsn, schema)
    try:
        assert await pool.fetchval("SHOW default_transaction_read_only") == "on"
        with recorded() as sent:
            replayed, _, was_replay = await commit_simple(store, "t1", "turn-1")
        assert was_replay and replayed == result
        assert len(sent) == 1 and sent[0].startswith("SELECT"), sent
        assert not any(word in sent[0] for word in ("INSERT", "UPDATE", "DELETE")), sent
        with pytest.raises(DurabilityError) as caught:  # a new turn needs a write
            await commit_simple(store, "t1", "turn-2")
        assert caught.value.code is ErrorCode.STORE_READ_ONLY
    finally:
        await store.close()
        await pool.close()


async def test_replay_on_a_read_only_session_the_server_did_not_announce(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a pooler the reported setting may be missing: the acquire is refused by the
    server (read-only) and the committed turn is then read with the plain SELECT."""
    writer = await open_store(dsn, schema)
    result, _, _ = await commit_simple(writer, "t1", "turn-1")
    await writer.close()
    store, pool = await read_only_store(dsn, schema)
    monkeypatch.setattr(Connection, "get_settings", lambda self: object())
    try:
        replayed, _, was_replay = await commit_simple(store, "t1", "turn-1")
        assert was_replay and replayed == result
        with pytest.raises(DurabilityError) as caught:
            await commit_simple(store, "t1", "turn-2")
        assert caught.value.code is ErrorCode.STORE_READ_ONLY
    finally:
        await store.close()
        await pool.close()


# -------------------------------------------------------------------- committed-text cache


async def test_the_committed_text_cache_is_bounded_by_bytes(dsn: str, schema: str) -> None:
    probe = await open_store(dsn, schema)
    await commit_simple(probe, "probe", "turn-1")
    one = probe.head_texts.written_bytes
    await probe.close()
    bound = one * 3 + one // 2  # room for three threads' texts
    store = await open_store(dsn, schema, head_cache_bytes=bound)
    for n in range(10):
        await commit_simple(store, f"thread-{n}", "turn-1")
        assert store.head_texts.written_bytes <= bound
    assert list(store.head_texts.written) == ["thread-7", "thread-8", "thread-9"]  # the latest ones
    loaded = await store.load_checkpoint("thread-0")  # evicted: decoded the precise way
    assert loaded is not None and loaded.revision == 1
    await store.close()
    none = await open_store(dsn, schema, head_cache_bytes=0)
    await commit_simple(none, "thread-0", "turn-2")
    assert none.head_texts.written == {} and none.head_texts.written_bytes == 0
    await none.close()


@pytest.mark.parametrize("value", [-1, 1.5, True, "64"])
def test_a_bad_head_cache_bound_is_refused(value: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        PostgresDurability(object(), head_cache_bytes=value)
    assert caught.value.context["setting"] == "head_cache_bytes"


# -------------------------------------------------------------------- migration 4


async def outbox_indexes(conn: Any, schema: str) -> set[str]:
    rows = await conn.fetch(
        "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'outbox'", schema
    )
    return {r["indexname"] for r in rows}


async def test_migration_4_drops_the_repeated_outbox_index(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema)
    for n in range(3):
        await commit_simple(store, f"t{n}", "turn-1")
    conn = await asyncpg.connect(dsn)
    try:
        found = await outbox_indexes(conn, schema)
        assert "outbox_by_thread" not in found and "outbox_open_in_thread" in found
        # A schema at version 3 (the index still there) is brought to 4.
        await conn.execute(
            f'CREATE INDEX outbox_by_thread ON "{schema}".outbox (thread_id, position)'
        )
        # ... and back to version 3: migrations 5 to 11 undone as well, so all run again.
        await conn.execute(
            f'DROP INDEX "{schema}".outbox_open_in_thread;'
            f' ALTER TABLE "{schema}".outbox DROP COLUMN revision, DROP CONSTRAINT outbox_pkey,'
            " ADD PRIMARY KEY (position);"
            f' CREATE INDEX outbox_open_by_thread ON "{schema}".outbox (thread_id, position)'
            " WHERE delivered_at IS NULL;"
            f' ALTER TABLE "{schema}".reconciliations DROP CONSTRAINT reconciliations_pkey,'
            " ADD PRIMARY KEY (position);"
            f' ALTER TABLE "{schema}".heads DROP COLUMN agent_fingerprint,'
            " DROP COLUMN pending_interaction;"
            f' DROP INDEX "{schema}".receipts_open;'
            f' DROP TABLE "{schema}".inbox, "{schema}".progress CASCADE;'
            f' DROP TABLE "{schema}".budget_counters, "{schema}".budget_reservations,'
            f' "{schema}".budget_limits, "{schema}".provider_state, "{schema}".provider_slots,'
            f' "{schema}".provider_waiters CASCADE;'
            f' DROP FUNCTION "{schema}".budget_reserve, "{schema}".slot_acquire,'
            f' "{schema}".budget_window;'
            f' DROP TABLE "{schema}".schedules, "{schema}".timers;'
            f' DROP TABLE "{schema}".relay_partitions'
        )
        await conn.execute(f'DELETE FROM "{schema}".schema_migrations WHERE version >= 4')
        assert await store.setup() == len(MIGRATIONS)
        assert "outbox_by_thread" not in await outbox_indexes(conn, schema)
        # Reading one thread's whole outbox still goes through an index, not the table.
        await conn.execute("SET enable_seqscan = off")
        plan = " ".join(
            r[0]
            for r in await conn.fetch(
                f'EXPLAIN SELECT position FROM "{schema}".outbox'
                " WHERE position > 0 AND thread_id = 't1' ORDER BY position LIMIT 100"
            )
        )
        assert "Index" in plan and "Seq Scan" not in plan, plan
        assert len(await store.read_outbox(thread_id="t1")) == 3
    finally:
        await conn.close()
    await store.close()
