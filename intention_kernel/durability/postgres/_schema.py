"""Ordered migrations of the PostgreSQL store, applied explicitly and checked at open.

The position of a migration in ``MIGRATIONS`` is its version (1-based). ``migrate`` applies the
missing ones in one transaction serialized by a transaction-level advisory lock (released at
COMMIT, so it works behind a transaction-mode pooler); nothing else in the adapter uses advisory
locks. ``verify`` only reads and refuses a missing, older or newer schema.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

from ...contracts.errors import ConfigurationError, ErrorCode, StoreSchemaError
from ._errors import create_schema_hint, translated

__all__ = ["DEFAULT_SCHEMA", "MIGRATIONS", "check_schema_name", "migrate", "verify"]

DEFAULT_SCHEMA = "intention_kernel"
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# Documents are stored as the codec's JSON text (already validated; read back byte for byte).
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {s}.leases (
        thread_id   text PRIMARY KEY,
        owner       text NOT NULL,
        epoch       bigint NOT NULL,
        expires_at  timestamptz NOT NULL
    );
    CREATE TABLE {s}.heads (
        thread_id   text PRIMARY KEY,
        revision    bigint NOT NULL CHECK (revision > 0),
        turn_id     text NOT NULL
    );
    CREATE TABLE {s}.turns (
        thread_id    text NOT NULL CHECK (length(thread_id) BETWEEN 1 AND 256),
        turn_id      text NOT NULL CHECK (length(turn_id) BETWEEN 1 AND 256),
        revision     bigint NOT NULL,
        fingerprint  text,
        result       text NOT NULL,
        committed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (thread_id, turn_id),
        CONSTRAINT turns_revision_key UNIQUE (thread_id, revision)
    );
    CREATE TABLE {s}.receipts (
        thread_id       text NOT NULL,
        idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 512),
        id              text NOT NULL,
        status          text NOT NULL
                        CHECK (status IN ('prepared', 'completed', 'failed', 'uncertain')),
        updated_at      timestamptz NOT NULL,
        receipt         text NOT NULL,
        PRIMARY KEY (thread_id, idempotency_key)
    );
    CREATE INDEX receipts_uncertain ON {s}.receipts (updated_at, id)
        WHERE status = 'uncertain';
    CREATE TABLE {s}.outbox (
        position    bigserial PRIMARY KEY,
        thread_id   text NOT NULL,
        turn_id     text NOT NULL,
        sequence    integer NOT NULL,
        event       text NOT NULL,
        UNIQUE (thread_id, turn_id, sequence)
    );
    CREATE INDEX outbox_by_thread ON {s}.outbox (thread_id, position);
    CREATE TABLE {s}.reconciliations (
        position        bigserial PRIMARY KEY,
        thread_id       text NOT NULL,
        idempotency_key text NOT NULL,
        record          text NOT NULL
    );
    CREATE INDEX reconciliations_by_key ON {s}.reconciliations (thread_id, idempotency_key);
    """,
    # 2: delivery state for the outbox relay (see ``_outbox``). Every added column is NULL or
    # has a constant default, so the ALTER does not rewrite a large outbox. The partial indexes
    # keep claims, dead letters and pruning off the delivered history.
    """
    ALTER TABLE {s}.outbox
        ADD COLUMN claimed_by      text,
        ADD COLUMN claimed_until   timestamptz,
        ADD COLUMN attempts        integer NOT NULL DEFAULT 0,
        ADD COLUMN last_error      text,
        ADD COLUMN next_attempt_at timestamptz,
        ADD COLUMN delivered_at    timestamptz,
        ADD COLUMN dead            boolean NOT NULL DEFAULT false;
    CREATE INDEX outbox_open ON {s}.outbox (position) WHERE delivered_at IS NULL;
    CREATE INDEX outbox_open_by_thread ON {s}.outbox (thread_id, position)
        WHERE delivered_at IS NULL;
    CREATE INDEX outbox_dead ON {s}.outbox (position) WHERE dead;
    CREATE INDEX outbox_delivered ON {s}.outbox (delivered_at) WHERE delivered_at IS NOT NULL;
    """,
    # 3: parsers that return NULL instead of failing, so an operator query over every thread
    # (listings, counts, outbox stats) reports a corrupt document instead of failing on it.
    """
    CREATE FUNCTION {s}.json_or_null(doc text) RETURNS json
        LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
    BEGIN
        RETURN doc::json;
    EXCEPTION WHEN others THEN
        RETURN NULL;
    END $$;
    CREATE FUNCTION {s}.timestamptz_or_null(value text) RETURNS timestamptz
        LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
    BEGIN
        RETURN value::timestamptz;
    EXCEPTION WHEN others THEN
        RETURN NULL;
    END $$;
    """,
    # 4: one index less to write per outbox event. ``outbox_by_thread`` (every row) repeated
    # ``outbox_open_by_thread`` for undelivered rows, which is what claims, stats and the
    # per-thread ordering rule read; a thread's whole history (``read_outbox`` by thread) is
    # found through the unique ``(thread_id, turn_id, sequence)`` index.
    """
    DROP INDEX IF EXISTS {s}.outbox_by_thread;
    """,
    # 5: what the thread listing filters on, kept on the head row by the commit statement so a
    # page never decodes heads it does not return: the head's agent fingerprint and the kind of
    # its pending interaction. Existing heads are filled from their documents (one that cannot
    # be read gets neither: it is listed as corrupt). Partial indexes find the few threads with
    # a pending interaction or an open receipt without scanning the others. The parsers of
    # migration 3 catch errors, which opens a subtransaction: not allowed in a parallel worker,
    # so a large scan planned in parallel failed; they run in the leader now.
    """
    ALTER TABLE {s}.heads
        ADD COLUMN agent_fingerprint   text,
        ADD COLUMN pending_interaction text;
    UPDATE {s}.heads h
       SET agent_fingerprint = d.doc #>> '{{checkpoint,agent_fingerprint}}',
           pending_interaction = CASE WHEN d.doc #>> '{{checkpoint,agent_fingerprint}}'
                                         IS NOT NULL
                                      THEN d.doc #>> '{{checkpoint,interaction,kind}}' END
      FROM (SELECT t.thread_id, t.turn_id, {s}.json_or_null(t.result) AS doc
              FROM {s}.turns t JOIN {s}.heads x
                ON x.thread_id = t.thread_id AND x.turn_id = t.turn_id) d
     WHERE d.thread_id = h.thread_id AND d.turn_id = h.turn_id;
    CREATE INDEX heads_pending ON {s}.heads (thread_id) WHERE pending_interaction IS NOT NULL;
    CREATE INDEX receipts_open ON {s}.receipts (thread_id)
        WHERE status IN ('uncertain', 'prepared');
    ALTER FUNCTION {s}.json_or_null(text) PARALLEL RESTRICTED;
    ALTER FUNCTION {s}.timestamptz_or_null(text) PARALLEL RESTRICTED;
    """,
)


def check_schema_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            "schema must be a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 63 chars)",
            context={"setting": "schema"},
        )
    return name


def _lock_key(schema: str) -> int:
    return zlib.crc32(f"intention_kernel:{schema}".encode()) - 2**31


async def migrate(conn: Any, schema: str) -> int:
    """Apply the missing migrations; returns the schema version now in place."""
    s = f'"{check_schema_name(schema)}"'
    with translated():
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key(schema))
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {s}.schema_migrations ("
                " version integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            current = await conn.fetchval(
                f"SELECT coalesce(max(version), 0) FROM {s}.schema_migrations"
            )
            _refuse_newer(current, schema)
            for version in range(current + 1, len(MIGRATIONS) + 1):
                await conn.execute(MIGRATIONS[version - 1].format(s=s))
                await conn.execute(
                    f"INSERT INTO {s}.schema_migrations (version) VALUES ($1)", version
                )
    return len(MIGRATIONS)


async def verify(conn: Any, schema: str) -> int:
    """Refuse to run on a missing, partly migrated or newer schema; returns its version."""
    s = f'"{check_schema_name(schema)}"'
    with translated():
        exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f"{s}.schema_migrations")
        current = (
            await conn.fetchval(f"SELECT coalesce(max(version), 0) FROM {s}.schema_migrations")
            if exists
            else 0
        )
    _refuse_newer(current, schema)
    if current < len(MIGRATIONS):
        raise StoreSchemaError(
            f"the store schema {schema} is at version {current} and this version needs"
            f" {len(MIGRATIONS)}: {create_schema_hint(schema)}",
            code=ErrorCode.STORE_SCHEMA_MISSING,
            context={"schema": schema, "found": current, "expected": len(MIGRATIONS)},
        )
    return current


def _refuse_newer(current: int, schema: str) -> None:
    if current > len(MIGRATIONS):
        raise StoreSchemaError(
            "the store schema is newer than this library: upgrade intention-kernel",
            code=ErrorCode.STORE_SCHEMA_TOO_NEW,
            context={"schema": schema, "found": current, "supported": len(MIGRATIONS)},
        )
