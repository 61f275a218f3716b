"""The PostgreSQL schema as a store distributed by thread needs it (docs/scale-out.md): every
key of a table of thread rows holds ``thread_id``, and a thread's outbox events go out in
``(revision, sequence)`` order however their positions were numbered (writers on several
nodes number them apart). Migration 11 brings an existing store there with its rows kept."""

from __future__ import annotations

import asyncpg

from intention_kernel.contracts.events import KernelEvent, StoredEvent
from intention_kernel.durability.postgres import MIGRATIONS
from intention_kernel.relay import OutboxRelay
from intention_kernel.testing import EventCollector
from intention_kernel.testing.conformance.outbox import commit_events
from tests.durability.conftest import open_store
from tests.support.postgres import schema_at_version

# Tables of rows that belong to no thread: reference tables on a distributed store.
_NOT_THREAD_ROWS = {
    "schema_migrations",
    "budget_counters",
    "budget_reservations",
    "budget_limits",
    "provider_state",
    "provider_slots",
    "provider_waiters",
    "schedules",
    "relay_partitions",
}


def _order(events: list[StoredEvent]) -> list[tuple[str, int]]:
    return [(e.event.turn_id, e.event.sequence) for e in events]


async def test_every_unique_key_of_a_thread_table_holds_the_thread(dsn: str, schema: str) -> None:
    """What a database distributed by ``thread_id`` (Citus) requires of every primary key and
    unique constraint; the tables without a thread are the ones listed as reference tables."""
    await (await open_store(dsn, schema)).close()
    conn = await asyncpg.connect(dsn)
    try:
        tables = await conn.fetch(
            "SELECT c.relname, bool_or(a.attname = 'thread_id') AS threaded"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0"
            " WHERE n.nspname = $1 AND c.relkind = 'r' GROUP BY c.relname",
            schema,
        )
        keys = await conn.fetch(
            "SELECT t.relname AS table_name, i.relname AS index_name,"
            " array(SELECT a.attname FROM pg_attribute a"
            "       WHERE a.attrelid = t.oid AND a.attnum = ANY(x.indkey)) AS columns"
            " FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid"
            " JOIN pg_class i ON i.oid = x.indexrelid"
            " JOIN pg_namespace n ON n.oid = t.relnamespace"
            " WHERE n.nspname = $1 AND x.indisunique",
            schema,
        )
    finally:
        await conn.close()
    threaded = {r["relname"] for r in tables if r["threaded"]}
    assert {r["relname"] for r in tables} - threaded == _NOT_THREAD_ROWS
    assert {"outbox", "inbox", "reconciliations", "turns", "receipts"} <= threaded
    for key in keys:
        if key["table_name"] in threaded:
            assert "thread_id" in key["columns"], (key["table_name"], key["index_name"])


async def test_a_thread_numbered_apart_goes_out_in_thread_order(dsn: str, schema: str) -> None:
    """A thread's positions numbered against its order (as two nodes' sequences could): the
    claim takes the thread's first events in thread order, an earlier event backing off
    holds the thread back whatever its position, and a relay delivers in thread order."""
    store = await open_store(dsn, schema)
    conn = await asyncpg.connect(dsn)
    table = f'"{schema}".outbox'
    try:
        await commit_events(store, "t1", "turn-1", 3)
        await commit_events(store, "t1", "turn-2", 3)
        await conn.execute(f"UPDATE {table} SET position = 1000000 - position")
        by_position = sorted(await store.read_outbox(limit=10), key=lambda e: e.position)
        assert _order(by_position)[0] == ("turn-2", 2)  # positions now say the opposite
        expected = [(t, s) for t in ("turn-1", "turn-2") for s in range(3)]

        first = await store.claim("relay-a", limit=2, lease=30)
        assert _order(first) == expected[:2]
        assert [e.revision for e in first] == [1, 1]
        await store.mark_delivered("relay-a", [e.position for e in first])
        [third] = await store.claim("relay-a", limit=1, lease=30)
        assert _order([third]) == [("turn-1", 2)]
        failed = await store.record_failure(
            "relay-a", third.position, error="down", retry_in=60, max_attempts=5
        )
        assert failed is not None and not failed.dead
        # Backing off with the highest position: turn-2's events wait behind it.
        assert await store.claim("relay-b", limit=10, lease=30) == []
        await conn.execute(f"UPDATE {table} SET next_attempt_at = NULL")

        sink = EventCollector()
        relay = OutboxRelay(store, sink, relay_id="relay-c", batch_size=2)
        while (await relay.run_once()).claimed:
            pass
        delivered = [(e.turn_id, e.sequence) for e in sink.events]
        assert delivered == expected[2:]
        assert (await store.outbox_stats()).pending == 0
    finally:
        await conn.close()
        await store.close()


async def test_migration_11_gives_existing_rows_their_revision_and_thread_keys(
    dsn: str, schema: str
) -> None:
    """A store at schema 10 with events of two turns, a reconciliation and an inbox request:
    after migration 11 every event carries its turn's revision, goes out in thread order, and
    the keys hold the thread."""
    conn = await asyncpg.connect(dsn)
    try:
        s = await schema_at_version(conn, schema, 10)
        for revision, turn in enumerate(("turn-1", "turn-2"), start=1):
            await conn.execute(
                f"INSERT INTO {s}.turns (thread_id, turn_id, revision, result)"
                " VALUES ('t1', $1, $2, '{}')",
                turn,
                revision,
            )
            for sequence in range(2):
                event = KernelEvent.model_validate(
                    {
                        "id": f"evt-{turn}-{sequence}",
                        "type": "test.event",
                        "occurred_at": "2026-01-01T00:00:00Z",
                        "thread_id": "t1",
                        "turn_id": turn,
                        "sequence": sequence,
                        "correlation_id": "c",
                    }
                )
                await conn.execute(
                    f"INSERT INTO {s}.outbox (thread_id, turn_id, sequence, event)"
                    " VALUES ('t1', $1, $2, $3)",
                    turn,
                    sequence,
                    event.model_dump_json(),
                )
        await conn.execute(
            f"INSERT INTO {s}.reconciliations (thread_id, idempotency_key, record)"
            " VALUES ('t1', 'k', '{}')"
        )
        await conn.execute(
            f"INSERT INTO {s}.inbox (thread_id, turn_id, state, text, payload, fingerprint,"
            " submitted_at, not_before) VALUES ('t1', 'turn-3', 'pending', 'hi', '{}',"
            " 'f', now(), now())"
        )
    finally:
        await conn.close()

    store = await open_store(dsn, schema)  # applies migration 11
    conn = await asyncpg.connect(dsn)
    try:
        assert await store.verify() == len(MIGRATIONS) == 11
        stored = sorted(await store.read_outbox(limit=10), key=lambda e: e.position)
        assert [(e.event.turn_id, e.revision) for e in stored] == [
            ("turn-1", 1),
            ("turn-1", 1),
            ("turn-2", 2),
            ("turn-2", 2),
        ]
        batch = await store.claim("relay-a", limit=10, lease=30)
        assert [e.thread_order for e in batch] == [(1, 0), (1, 1), (2, 0), (2, 1)]
        keys = await conn.fetch(
            "SELECT t.relname, pg_get_indexdef(x.indexrelid) AS definition FROM pg_index x"
            " JOIN pg_class t ON t.oid = x.indrelid"
            " JOIN pg_namespace n ON n.oid = t.relnamespace"
            " WHERE n.nspname = $1 AND x.indisprimary"
            " AND t.relname IN ('outbox', 'inbox', 'reconciliations')",
            schema,
        )
        assert {r["relname"]: r["definition"].split("btree ")[1] for r in keys} == {
            "outbox": '("position", thread_id)',
            "inbox": '("position", thread_id)',
            "reconciliations": '("position", thread_id)',
        }
        assert await conn.fetchval(f"SELECT count(*) FROM {s}.reconciliations") == 1
        assert await conn.fetchval(f"SELECT count(*) FROM {s}.inbox") == 1
    finally:
        await conn.close()
        await store.close()
