"""Ordered migrations of the PostgreSQL store, applied explicitly and checked at open.

A migration's position in ``MIGRATIONS`` is its version (1-based). ``migrate`` applies the
missing ones in one transaction serialized by a transaction-level advisory lock (released at
COMMIT, so it works behind a transaction-mode pooler; the inbox's per-thread advisory locks
are two-key, never this one). ``verify`` only reads and refuses a missing, older or newer one.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

from ...contracts.errors import ConfigurationError, ErrorCode, StoreSchemaError
from ._connection import read_only
from ._errors import create_schema_hint, translated
from ._flow_schema import FLOW_MIGRATION
from ._schedule_schema import SCHEDULE_MIGRATION
from ._thread_keys_schema import THREAD_KEYS_MIGRATION

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
    # 6: the turn inbox (``_inbox``) and the progress log of running turns. ``ready_at`` is
    # when an open request can be claimed (``not_before`` of a pending one, the claim's expiry
    # of a running one). The claim walks ``inbox_ready`` from its start: requests that are not
    # due are past the walk's end; done and dead ones are in none of the claim's indexes; a
    # request found not to be the head of its thread is set aside behind its predecessor
    # (``held_by``, the predecessor marked ``holds_back``) and walked again only when that one
    # has finished (``inbox_finished_holders``). ``inbox_claim`` is the claim (see ``_inbox``).
    # The generic plans a session keeps after five calls scanned the primary key back through
    # a deep thread's history: the predecessor lookup is dynamic SQL (planned for its thread),
    # the claim's recheck reaches the thread's index by a position the key cannot range over.
    """
    CREATE TABLE {s}.inbox (
        position      bigserial PRIMARY KEY,
        thread_id     text NOT NULL CHECK (length(thread_id) BETWEEN 1 AND 256),
        turn_id       text NOT NULL CHECK (length(turn_id) BETWEEN 1 AND 256),
        state         text NOT NULL CHECK (state IN ('pending', 'running', 'done', 'dead')),
        text          text NOT NULL,
        payload       text NOT NULL,
        fingerprint   text NOT NULL,
        submitted_at  timestamptz NOT NULL,
        not_before    timestamptz NOT NULL,
        attempts      integer NOT NULL DEFAULT 0,
        claimed_by    text,
        claimed_until timestamptz,
        finished_at   timestamptz,
        error_code    text,
        error         text,
        operator_log  text,
        held_by       bigint,
        holds_back    boolean NOT NULL DEFAULT false,
        ready_at      timestamptz GENERATED ALWAYS AS (
                          CASE state WHEN 'pending' THEN not_before
                                     WHEN 'running' THEN claimed_until END) STORED,
        CONSTRAINT inbox_request_key UNIQUE (thread_id, turn_id),
        CONSTRAINT inbox_claim_expires CHECK (state <> 'running' OR claimed_until IS NOT NULL)
    );
    CREATE INDEX inbox_ready ON {s}.inbox (ready_at, position)
        WHERE state IN ('pending', 'running') AND held_by IS NULL;
    CREATE INDEX inbox_open_by_thread ON {s}.inbox (thread_id, position)
        WHERE state IN ('pending', 'running');
    CREATE INDEX inbox_running_by_worker ON {s}.inbox (claimed_by) WHERE state = 'running';
    -- Every running request has a claim expiry; saying so here keeps this index to the claim's
    -- check of live claims (a renewal by worker cannot use it, so it always takes the other).
    CREATE INDEX inbox_running_by_thread ON {s}.inbox (thread_id)
        WHERE state = 'running' AND claimed_until IS NOT NULL;
    CREATE INDEX inbox_held ON {s}.inbox (held_by) WHERE held_by IS NOT NULL;
    CREATE INDEX inbox_finished_holders ON {s}.inbox (position)
        WHERE holds_back AND state IN ('done', 'dead');
    CREATE INDEX inbox_dead ON {s}.inbox (position) WHERE state = 'dead';
    CREATE TABLE {s}.progress (
        thread_id   text NOT NULL,
        turn_id     text NOT NULL,
        seq         integer NOT NULL,
        item        text NOT NULL,
        written_at  timestamptz NOT NULL,
        PRIMARY KEY (thread_id, turn_id, seq)
    );
    CREATE INDEX progress_written ON {s}.progress USING brin (written_at);
    CREATE FUNCTION {s}.inbox_claim(worker text, ttl float8)
        RETURNS SETOF {s}.inbox LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        at_time        timestamptz := clock_timestamp();
        seen_ready     timestamptz := '-infinity';
        seen_position  bigint := 0;
        finished       bigint;
        predecessor    bigint;
        candidate      record;
        claimed        {s}.inbox;
    BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        -- Requests set aside behind one that has finished since are walked again.
        FOR finished IN
            SELECT f.position FROM {s}.inbox f
             WHERE f.holds_back AND f.state IN ('done', 'dead') FOR UPDATE SKIP LOCKED
        LOOP
            UPDATE {s}.inbox SET held_by = NULL WHERE held_by = finished;
            UPDATE {s}.inbox SET holds_back = false WHERE position = finished;
        END LOOP;
        LOOP
            SELECT i.position, i.thread_id, i.ready_at INTO candidate
              FROM {s}.inbox i
             WHERE i.state IN ('pending', 'running') AND i.held_by IS NULL
               AND i.ready_at <= at_time
               AND (i.ready_at, i.position) > (seen_ready, seen_position)
             ORDER BY i.ready_at, i.position
             LIMIT 1;
            IF NOT FOUND THEN
                RETURN;
            END IF;
            seen_ready := candidate.ready_at;
            seen_position := candidate.position;
            -- Another claim of the thread is under way: the thread is skipped, never awaited.
            CONTINUE WHEN NOT pg_try_advisory_xact_lock(
                hashtext('{s}'), hashtext(candidate.thread_id));
            -- New statements, so snapshots taken under the thread's lock. An earlier open
            -- request (locked: it cannot finish before this commits; one being changed right
            -- now is passed over for the one before it)?
            EXECUTE 'SELECT p.position FROM {s}.inbox p
             WHERE p.thread_id = $1 AND p.position < $2 AND p.state IN (''pending'', ''running'')
             ORDER BY p.position DESC LIMIT 1 FOR SHARE SKIP LOCKED'
               INTO predecessor USING candidate.thread_id, candidate.position;
            IF predecessor IS NOT NULL THEN
                -- Not the head: set aside until its predecessor has finished.
                UPDATE {s}.inbox SET holds_back = true
                 WHERE position = predecessor AND NOT holds_back;
                UPDATE {s}.inbox SET held_by = predecessor
                 WHERE position = candidate.position AND held_by IS NULL
                   AND state IN ('pending', 'running');
                CONTINUE;
            END IF;
            -- The claim rule again, on this snapshot; the candidate locked, rechecked.
            UPDATE {s}.inbox u
               SET state = 'running', claimed_by = worker, attempts = u.attempts + 1,
                   claimed_until = at_time + make_interval(secs => ttl)
             WHERE u.position = (
                   SELECT k.position FROM {s}.inbox k
                    WHERE k.position = candidate.position
                      AND k.state IN ('pending', 'running') AND k.ready_at <= at_time
                      FOR UPDATE SKIP LOCKED)
               AND NOT EXISTS (  -- "+ 0": through the thread's index, not the primary key's
                   SELECT 1 FROM {s}.inbox e
                    WHERE e.thread_id = candidate.thread_id
                      AND e.position + 0 < candidate.position
                      AND e.state IN ('pending', 'running'))
               AND NOT EXISTS (
                   SELECT 1 FROM {s}.inbox r
                    WHERE r.thread_id = candidate.thread_id AND r.state = 'running'
                      AND r.claimed_until > at_time AND r.position <> candidate.position)
            RETURNING u.* INTO claimed;
            IF claimed.position IS NOT NULL THEN
                RETURN NEXT claimed;
                RETURN;
            END IF;
        END LOOP;
    END $$;
    """,
    # 7: a submit that is also the claim, for a worker of the submitting process with a free
    # slot (see ``_inbox``). A function: under the thread's lock, its statements see the
    # requests submitted and claimed before (one statement's snapshot would predate the lock).
    # No row: the id is taken (a request or a committed turn); the caller submits as usual.
    """
    CREATE FUNCTION {s}.inbox_submit_claimed(
        thread text, turn text, body text, payload text, fingerprint text, worker text,
        ttl float8) RETURNS SETOF {s}.inbox LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        claim   boolean;
        stored  {s}.inbox;
    BEGIN
        PERFORM set_config('synchronous_commit', 'on', true);
        PERFORM pg_advisory_xact_lock(hashtext('{s}'), hashtext(thread));
        IF EXISTS (SELECT 1 FROM {s}.inbox WHERE thread_id = thread AND turn_id = turn)
           OR EXISTS (SELECT 1 FROM {s}.turns WHERE thread_id = thread AND turn_id = turn) THEN
            RETURN;
        END IF;
        claim := NOT EXISTS (SELECT 1 FROM {s}.inbox WHERE thread_id = thread
                             AND state IN ('pending', 'running'));
        INSERT INTO {s}.inbox (thread_id, turn_id, state, text, payload, fingerprint,
                               submitted_at, not_before, attempts, claimed_by, claimed_until)
        VALUES (thread, turn, CASE WHEN claim THEN 'running' ELSE 'pending' END, body, payload,
                fingerprint, now(), now(), CASE WHEN claim THEN 1 ELSE 0 END,
                CASE WHEN claim THEN worker END,
                CASE WHEN claim THEN clock_timestamp() + make_interval(secs => ttl) END)
        ON CONFLICT (thread_id, turn_id) DO NOTHING
        RETURNING * INTO stored;
        IF FOUND THEN
            RETURN NEXT stored;
        END IF;
    END $$;
    """,
    # 8: budget counters and provider slots (``_flow_schema``).
    FLOW_MIGRATION,
    # 9: schedules and timers (``_schedule_schema``).
    SCHEDULE_MIGRATION,
    # 10: partition leases of outbox relays (``_outbox``; ``contracts.outbox`` has the rule).
    """
    CREATE TABLE {s}.relay_partitions (
        partitions  integer NOT NULL,
        partition   integer NOT NULL,
        holder      text NOT NULL,
        held_until  timestamptz NOT NULL,
        PRIMARY KEY (partitions, partition)
    );
    """,
    THREAD_KEYS_MIGRATION,  # 11: keys that hold the thread (``_thread_keys_schema``)
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


async def _version(conn: Any, s: str, schema: str) -> int:
    """The schema's version (0: none), read without a lock; a newer one is refused."""
    found = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f"{s}.schema_migrations")
    sql = f"SELECT coalesce(max(version), 0) FROM {s}.schema_migrations"
    current = int(await conn.fetchval(sql)) if found else 0
    _refuse_newer(current, schema)
    return current


async def migrate(conn: Any, schema: str) -> int:
    """Apply the missing migrations; returns the version in place. A current schema is only
    read (a transaction queued on the lock holds a pooler's connection), unless read-only."""
    s = f'"{check_schema_name(schema)}"'
    with translated():
        if not read_only(conn) and await _version(conn, s, schema) == len(MIGRATIONS):
            return len(MIGRATIONS)
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key(schema))
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {s}.schema_migrations (version integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for version in range(await _version(conn, s, schema) + 1, len(MIGRATIONS) + 1):
                await conn.execute(MIGRATIONS[version - 1].format(s=s))
                await conn.execute(
                    f"INSERT INTO {s}.schema_migrations (version) VALUES ($1)", version
                )
    return len(MIGRATIONS)


async def verify(conn: Any, schema: str) -> int:
    """Refuse to run on a missing, partly migrated or newer schema; returns its version."""
    with translated():
        current = await _version(conn, f'"{check_schema_name(schema)}"', schema)
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
