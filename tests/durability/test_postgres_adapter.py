"""PostgreSQL-specific behaviour beyond the conformance suite: schema, lease, round trips."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import pytest

from intention_kernel.contracts import DurabilityStore, TurnScope
from intention_kernel.contracts.errors import (
    CheckpointCorruptError,
    ConfigurationError,
    DurabilityError,
    ErrorCode,
    LeaseLostError,
    StoreSchemaError,
)
from intention_kernel.durability.postgres import MIGRATIONS, PostgresDurability, _schema
from intention_kernel.testing.conformance import Provider, commit_simple, effect, make_result
from tests.support.postgres import revoke_lease

from ._statements import recorded
from .conftest import open_store


async def test_setup_is_idempotent_and_concurrent(dsn: str, schema: str) -> None:
    stores = await asyncio.gather(*(open_store(dsn, schema, max_size=1) for _ in range(4)))
    for store in stores:
        assert await store.setup() == len(MIGRATIONS)
        assert await store.verify() == len(MIGRATIONS)
        await store.close()


async def test_setup_on_a_current_schema_takes_no_migration_lock(dsn: str, schema: str) -> None:
    """A process that opens with ``setup`` on a schema in place only reads it, so it
    neither waits behind another process's migration nor holds a pooled connection doing so."""
    store = await open_store(dsn, schema)
    await store.close()
    holder = await asyncpg.connect(dsn)
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", _schema._lock_key(schema))
        async with asyncio.timeout(5):
            reopened = await PostgresDurability.open(
                dsn, schema=schema, setup=True, lock_timeout=30
            )
        assert await reopened.setup() == len(MIGRATIONS)
        await reopened.close()
    finally:
        await holder.close()


async def test_open_refuses_a_missing_schema(dsn: str, schema: str) -> None:
    with pytest.raises(StoreSchemaError) as caught:
        await PostgresDurability.open(dsn, schema=schema)
    assert caught.value.code == ErrorCode.STORE_SCHEMA_MISSING


async def test_open_refuses_a_newer_schema(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema)
    await store.close()
    conn = await asyncpg.connect(dsn)
    await conn.execute(f'INSERT INTO "{schema}".schema_migrations (version) VALUES (99)')
    await conn.close()
    with pytest.raises(StoreSchemaError) as caught:
        await PostgresDurability.open(dsn, schema=schema)
    assert caught.value.code == ErrorCode.STORE_SCHEMA_TOO_NEW
    with pytest.raises(StoreSchemaError):
        await PostgresDurability.open(dsn, schema=schema, setup=True)


@pytest.mark.parametrize(
    "options",
    [
        {"schema": "Bad-Name"},
        {"schema": "x; DROP TABLE y"},
        {"lease_ttl": 0},
        {"lease_ttl": 5, "heartbeat_interval": 5},
        {"lease_ttl": 5, "heartbeat_interval": -1},
        {"lock_timeout": 0},
    ],
)
def test_bad_settings_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        PostgresDurability(object(), **options)


async def test_bad_url_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        await PostgresDurability.open("mysql://nope")


async def test_unreachable_server_is_a_retryable_typed_error() -> None:
    with pytest.raises(DurabilityError) as caught:
        await PostgresDurability.open("postgresql://postgres@127.0.0.1:1/none")
    assert caught.value.code == ErrorCode.STORE_UNAVAILABLE and caught.value.retryable


async def test_async_with_open_closes_the_pool(dsn: str, schema: str) -> None:
    async with PostgresDurability.open(dsn, schema=schema, setup=True) as store:
        await commit_simple(store, "t1", "turn-1")
    assert store._closed


async def test_heartbeat_keeps_a_long_turn_leased(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema, lease_ttl=1.2, heartbeat_interval=0.2)
    other = await open_store(dsn, schema, lock_timeout=0.5)
    entered = asyncio.Event()

    async def long_turn(scope: TurnScope) -> str:
        entered.set()
        await asyncio.sleep(3.0)  # longer than the TTL: only renewals keep the lease
        await scope.commit(make_result(scope))
        return "done"

    held = asyncio.create_task(store.with_turn("t1", "turn-1", long_turn))
    await entered.wait()
    await asyncio.sleep(1.8)
    with pytest.raises(DurabilityError) as caught:
        await commit_simple(other, "t1", "turn-2")
    assert caught.value.code == ErrorCode.LOCK_TIMEOUT
    assert await held == "done"
    await store.close()
    await other.close()


async def test_a_lost_lease_cancels_the_running_turn(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema, lease_ttl=0.6, heartbeat_interval=0.1)

    async def parked(scope: TurnScope) -> None:
        await revoke_lease(store, "t1")
        await asyncio.sleep(10)

    started = time.monotonic()
    with pytest.raises(LeaseLostError):
        await store.with_turn("t1", "turn-1", parked)
    assert time.monotonic() - started < 2
    assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]
    await commit_simple(store, "t1", "turn-1")  # the store stays usable
    await store.close()


async def test_a_crashed_holders_lease_expires_after_its_ttl(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema, lease_ttl=0.5, lock_timeout=5)
    conn = await asyncpg.connect(dsn)
    await conn.execute(
        f"INSERT INTO \"{schema}\".leases VALUES ($1, $2, 7, clock_timestamp() + interval '1 s')",
        "t1",
        "crashed-worker",
    )
    started = time.monotonic()
    await commit_simple(store, "t1", "turn-1")
    waited = time.monotonic() - started
    assert 0.7 < waited < 3
    epoch = await conn.fetchval(f'SELECT epoch FROM "{schema}".leases WHERE thread_id = $1', "t1")
    assert epoch == 8  # took over the expired lease, bumping the epoch
    expires = await conn.fetchval(
        f"SELECT expires_at = '-infinity' FROM \"{schema}\".leases WHERE thread_id = $1", "t1"
    )
    assert expires  # a clean exit released it at once
    await conn.close()
    await store.close()


async def test_round_trips_per_turn(dsn: str, schema: str) -> None:
    store = await open_store(dsn, schema)
    await commit_simple(store, "t0", "seed")  # the pool's connections are warm
    with recorded() as sent:
        await commit_simple(store, "t1", "turn-1")
    # acquire+load, commit (which also releases the lease): nothing else
    assert len(sent) == 2, sent
    assert "INSERT INTO" in sent[0] and "leases" in sent[0]
    assert "UPDATE" in sent[1] and "-infinity" in sent[1]
    assert await lease_released(store, "t1")
    with recorded() as sent:
        _, _, replayed = await commit_simple(store, "t1", "turn-1")
    assert replayed and len(sent) == 1, sent  # one read, no lease
    provider = Provider()
    with recorded() as sent:
        await commit_simple(store, "t1", "turn-2", effects=[(effect("k1"), provider.returning(1))])
    # acquire+load, prepared (insert unless the key exists), completed, commit+release
    assert len(sent) == 4, sent
    assert "ON CONFLICT (thread_id, idempotency_key) DO NOTHING" in sent[1]
    assert await lease_released(store, "t1")
    with recorded() as sent:  # the same key again: the conflict returns the stored receipt
        _, executions, _ = await commit_simple(
            store, "t1", "turn-3", effects=[(effect("k1"), provider.returning(2))]
        )
    assert executions[0].replayed and sum(provider.calls.values()) == 1
    assert len(sent) == 3, sent  # acquire+load, prepare (conflict: receipt back), commit
    await store.close()


async def lease_released(store: PostgresDurability, thread_id: str) -> bool:
    released = await store.pool.fetchval(
        f"SELECT expires_at = '-infinity' FROM \"{store.schema}\".leases WHERE thread_id = $1",
        thread_id,
    )
    return bool(released)


async def test_commits_are_synchronous_even_when_the_session_default_is_off(
    dsn: str, schema: str
) -> None:
    pool = await asyncpg.create_pool(
        dsn, min_size=1, max_size=1, server_settings={"synchronous_commit": "off"}
    )
    store = await PostgresDurability.open(pool, schema=schema, setup=True)
    observer = await asyncpg.connect(dsn)

    async def wal_syncs() -> int:
        await asyncio.sleep(1.1)  # backends report WAL statistics at most once a second
        await pool.execute("SELECT 1")
        await asyncio.sleep(1.1)
        return int(await observer.fetchval("SELECT wal_sync FROM pg_stat_wal"))

    before = await wal_syncs()
    for i in range(20):
        await commit_simple(store, "t1", f"turn-{i}")
    assert await wal_syncs() - before >= 20
    await observer.close()
    await store.close()
    await pool.close()


async def test_reads_use_the_uncertain_index(dsn: str, schema: str) -> None:
    store: DurabilityStore = await open_store(dsn, schema)
    conn = await asyncpg.connect(dsn)
    await conn.execute("SET enable_seqscan = off")
    plan = await conn.fetch(
        f"EXPLAIN SELECT receipt FROM \"{schema}\".receipts WHERE status = 'uncertain'"
        " ORDER BY updated_at, id LIMIT 100"
    )
    assert "receipts_uncertain" in " ".join(row[0] for row in plan)
    await conn.close()
    await store.close()


async def test_a_head_changed_behind_the_writer_is_decoded_precisely(dsn: str, schema: str) -> None:
    """The head this process committed is decoded by the fast path only while the stored
    text is byte for byte what it wrote; a tampered one (duplicate key) is still refused."""
    store = await open_store(dsn, schema)
    await commit_simple(store, "t1", "turn-1")
    loaded = await store.load_checkpoint("t1")
    assert loaded is not None and loaded.revision == 1
    await commit_simple(store, "t1", "turn-2")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f'UPDATE "{schema}".turns SET result = replace(result, \'{{"thread_id":\','
            ' \'{"thread_id":"x","thread_id":\') WHERE thread_id = \'t1\' AND revision = 2'
        )
    finally:
        await conn.close()
    with pytest.raises(CheckpointCorruptError):
        await store.load_checkpoint("t1")
    with pytest.raises(CheckpointCorruptError):
        await commit_simple(store, "t1", "turn-3")
    await store.close()
