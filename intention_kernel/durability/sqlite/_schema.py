"""The store's schema as an ordered list of migrations; the list index + 1 is the version.

Applied versions are recorded in ``ik_schema``. ``migrate`` applies what is missing inside one
``BEGIN IMMEDIATE`` transaction, so processes opening a new file at once serialize; a database
whose recorded version is newer than this code is refused before anything is touched.
Append new migrations; never edit a released one.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

from ...contracts.errors import ErrorCode, StoreSchemaError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate", "stored_version"]

_ID = "length({0}) BETWEEN 1 AND 256"

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: turns, heads, leases, receipts, outbox, reconciliations.
    (
        f"""CREATE TABLE ik_leases (
            thread_id TEXT PRIMARY KEY CHECK ({_ID.format("thread_id")}),
            epoch INTEGER NOT NULL CHECK (epoch >= 1)
        ) WITHOUT ROWID""",
        f"""CREATE TABLE ik_turns (
            seq INTEGER PRIMARY KEY,
            thread_id TEXT NOT NULL CHECK ({_ID.format("thread_id")}),
            turn_id TEXT NOT NULL CHECK ({_ID.format("turn_id")}),
            revision INTEGER NOT NULL CHECK (revision >= 1),
            fingerprint TEXT CHECK (fingerprint IS NULL OR {_ID.format("fingerprint")}),
            result TEXT NOT NULL,
            committed_at TEXT NOT NULL,
            UNIQUE (thread_id, turn_id),
            UNIQUE (thread_id, revision)
        )""",
        """CREATE TABLE ik_heads (
            thread_id TEXT PRIMARY KEY,
            revision INTEGER NOT NULL CHECK (revision >= 1),
            turn_id TEXT NOT NULL
        ) WITHOUT ROWID""",
        f"""CREATE TABLE ik_receipts (
            thread_id TEXT NOT NULL CHECK ({_ID.format("thread_id")}),
            idempotency_key TEXT NOT NULL
                CHECK (length(idempotency_key) BETWEEN 1 AND 512),
            receipt_id TEXT NOT NULL CHECK ({_ID.format("receipt_id")}),
            capability_id TEXT NOT NULL CHECK ({_ID.format("capability_id")}),
            status TEXT NOT NULL
                CHECK (status IN ('prepared', 'completed', 'failed', 'uncertain')),
            updated_us INTEGER NOT NULL,
            document TEXT NOT NULL,
            PRIMARY KEY (thread_id, idempotency_key)
        ) WITHOUT ROWID""",
        "CREATE INDEX ik_receipts_by_status ON ik_receipts (status, updated_us, receipt_id)",
        "CREATE INDEX ik_receipts_by_update ON ik_receipts (updated_us, receipt_id)",
        f"""CREATE TABLE ik_outbox (
            position INTEGER PRIMARY KEY AUTOINCREMENT,
            thread_id TEXT NOT NULL CHECK ({_ID.format("thread_id")}),
            turn_id TEXT NOT NULL CHECK ({_ID.format("turn_id")}),
            event_id TEXT NOT NULL CHECK ({_ID.format("event_id")}),
            sequence INTEGER NOT NULL,
            document TEXT NOT NULL,
            delivered_at TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            dead INTEGER NOT NULL DEFAULT 0 CHECK (dead IN (0, 1)),
            UNIQUE (thread_id, turn_id, event_id)
        )""",
        "CREATE INDEX ik_outbox_by_thread ON ik_outbox (thread_id, position)",
        """CREATE TABLE ik_reconciliations (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            thread_id TEXT NOT NULL,
            idempotency_key TEXT NOT NULL,
            document TEXT NOT NULL
        )""",
        "CREATE INDEX ik_reconciliations_by_key"
        " ON ik_reconciliations (thread_id, idempotency_key, seq)",
    ),
    # 2: outbox delivery state for relays (claims, retry time, delivery time as microseconds).
    # Partial indexes keep claim, dead-letter listing and prune cheap however much delivered
    # history is kept.
    (
        "ALTER TABLE ik_outbox ADD COLUMN claimed_by TEXT",
        "ALTER TABLE ik_outbox ADD COLUMN claimed_until INTEGER",
        "ALTER TABLE ik_outbox ADD COLUMN next_attempt_at INTEGER",
        "ALTER TABLE ik_outbox ADD COLUMN delivered_us INTEGER",
        "CREATE INDEX ik_outbox_open ON ik_outbox (position) WHERE delivered_at IS NULL",
        "CREATE INDEX ik_outbox_dead ON ik_outbox (position) WHERE dead = 1",
        "CREATE INDEX ik_outbox_delivered ON ik_outbox (delivered_us)"
        " WHERE delivered_us IS NOT NULL",
    ),
    # 3: what the thread listing filters on, kept on the head row by every commit so a page
    # never decodes heads it does not return: the head's agent fingerprint and the kind of its
    # pending interaction. Existing heads are filled from their documents (one that cannot be
    # read gets neither: it is listed as corrupt). Partial indexes find the few threads with a
    # pending interaction or an open receipt without scanning the others.
    (
        "ALTER TABLE ik_heads ADD COLUMN agent_fingerprint TEXT",
        "ALTER TABLE ik_heads ADD COLUMN pending_interaction TEXT",
        """UPDATE ik_heads SET
            agent_fingerprint = (
                SELECT json_extract(t.result, '$.checkpoint.agent_fingerprint') FROM ik_turns AS t
                 WHERE t.thread_id = ik_heads.thread_id AND t.turn_id = ik_heads.turn_id
                   AND json_valid(t.result)
                   AND json_type(t.result, '$.checkpoint.agent_fingerprint') = 'text'),
            pending_interaction = (
                SELECT json_extract(t.result, '$.checkpoint.interaction.kind') FROM ik_turns AS t
                 WHERE t.thread_id = ik_heads.thread_id AND t.turn_id = ik_heads.turn_id
                   AND json_valid(t.result)
                   AND json_type(t.result, '$.checkpoint.agent_fingerprint') = 'text'
                   AND json_type(t.result, '$.checkpoint.interaction.kind') = 'text')""",
        "CREATE INDEX ik_heads_pending ON ik_heads (thread_id)"
        " WHERE pending_interaction IS NOT NULL",
        "CREATE INDEX ik_receipts_open ON ik_receipts (thread_id)"
        " WHERE status IN ('uncertain', 'prepared')",
    ),
    # 4: the turn inbox (``contracts.inbox``): one row per turn request, ``position`` its
    # submission order, times as UTC ISO text of fixed width (so text order is time order), and
    # the progress log of running turns. Partial indexes on the open (pending or running) rows
    # keep a claim, the head check of a thread and the backlog counts off done and dead rows.
    (
        f"""CREATE TABLE ik_inbox (
            position INTEGER PRIMARY KEY AUTOINCREMENT,
            thread_id TEXT NOT NULL CHECK ({_ID.format("thread_id")}),
            turn_id TEXT NOT NULL CHECK ({_ID.format("turn_id")}),
            state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'done', 'dead')),
            text TEXT NOT NULL,
            payload TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            submitted_at TEXT NOT NULL,
            not_before TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            claimed_by TEXT,
            claimed_until TEXT,
            finished_at TEXT,
            error_code TEXT,
            error TEXT,
            operator_log TEXT,
            UNIQUE (thread_id, turn_id)
        )""",
        "CREATE INDEX ik_inbox_open ON ik_inbox (position) WHERE state IN ('pending', 'running')",
        "CREATE INDEX ik_inbox_open_by_thread ON ik_inbox (thread_id, position)"
        " WHERE state IN ('pending', 'running')",
        "CREATE INDEX ik_inbox_dead ON ik_inbox (position) WHERE state = 'dead'",
        """CREATE TABLE ik_progress (
            thread_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            seq INTEGER NOT NULL CHECK (seq >= 1),
            item TEXT NOT NULL,
            written_at TEXT NOT NULL,
            PRIMARY KEY (thread_id, turn_id, seq)
        ) WITHOUT ROWID""",
        "CREATE INDEX ik_progress_by_time ON ik_progress (written_at)",
    ),
    # 5: budget counters per line and window, their open reservations and operators' limits;
    # provider slots (leases), the queue of waiters (``ticket`` order) and each provider's
    # cool-down and starts this minute (``_flow``). Times as UTC ISO text, as for the inbox.
    (
        """CREATE TABLE ik_budget_counters (
            budget TEXT NOT NULL,
            scope_key TEXT NOT NULL,
            window_start TEXT NOT NULL,
            per TEXT NOT NULL,
            tokens_used INTEGER NOT NULL,
            tokens_reserved INTEGER NOT NULL,
            cost_used REAL NOT NULL,
            cost_reserved REAL NOT NULL,
            calls INTEGER NOT NULL,
            tokens_limit INTEGER,
            cost_limit REAL,
            PRIMARY KEY (budget, scope_key, window_start)
        ) WITHOUT ROWID""",
        "CREATE INDEX ik_budget_counters_by_window ON ik_budget_counters (window_start)",
        """CREATE TABLE ik_budget_reservations (
            id TEXT PRIMARY KEY,
            budget TEXT NOT NULL,
            scope_key TEXT NOT NULL,
            window_start TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            cost REAL NOT NULL,
            reserved_at TEXT NOT NULL
        ) WITHOUT ROWID""",
        """CREATE TABLE ik_budget_limits (
            budget TEXT NOT NULL,
            scope_key TEXT NOT NULL,
            tokens INTEGER CHECK (tokens > 0),
            cost REAL CHECK (cost > 0),
            actor TEXT NOT NULL,
            note TEXT NOT NULL,
            set_at TEXT NOT NULL,
            PRIMARY KEY (budget, scope_key)
        ) WITHOUT ROWID""",
        """CREATE TABLE ik_provider_slots (
            provider TEXT NOT NULL,
            holder TEXT NOT NULL,
            expires_at TEXT NOT NULL,
            PRIMARY KEY (provider, holder)
        ) WITHOUT ROWID""",
        """CREATE TABLE ik_provider_waiters (
            provider TEXT NOT NULL,
            holder TEXT NOT NULL,
            ticket INTEGER NOT NULL,
            expires_at TEXT NOT NULL,
            PRIMARY KEY (provider, holder)
        ) WITHOUT ROWID""",
        """CREATE TABLE ik_provider_state (
            provider TEXT PRIMARY KEY,
            cooling_until TEXT,
            minute TEXT,
            started INTEGER NOT NULL,
            tickets INTEGER NOT NULL
        ) WITHOUT ROWID""",
    ),
    # 6: schedules and timers (``_schedules``): the definition a scheduler last registered, the
    # moment its occurrences count from and the latest occurrence dealt with; turns to submit
    # at a time (UTC ISO text).
    (
        """CREATE TABLE ik_schedules (
            schedule_id TEXT PRIMARY KEY,
            definition TEXT NOT NULL,
            anchor TEXT NOT NULL,
            seen_at TEXT NOT NULL,
            last_occurrence TEXT
        ) WITHOUT ROWID""",
        """CREATE TABLE ik_timers (
            thread_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            due_at TEXT NOT NULL,
            text TEXT NOT NULL,
            payload TEXT NOT NULL,
            PRIMARY KEY (thread_id, turn_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX ik_timers_due ON ik_timers (due_at)",
    ),
    # 7: partition leases of outbox relays (``_outbox``): holder and expiry in microseconds.
    (
        """CREATE TABLE ik_relay_partitions (
            partitions INTEGER NOT NULL,
            partition INTEGER NOT NULL,
            holder TEXT NOT NULL,
            held_until INTEGER NOT NULL,
            PRIMARY KEY (partitions, partition)
        ) WITHOUT ROWID""",
    ),
    # 8: the thread revision each outbox event's turn committed: a thread's events are ordered
    # by (revision, sequence) on every store (``contracts.outbox``); here positions follow that
    # order too (one writer), so no index reads it. Existing rows get their turn's revision.
    (
        "ALTER TABLE ik_outbox ADD COLUMN revision INTEGER NOT NULL DEFAULT 0",
        """UPDATE ik_outbox SET revision = coalesce(
            (SELECT t.revision FROM ik_turns AS t
              WHERE t.thread_id = ik_outbox.thread_id AND t.turn_id = ik_outbox.turn_id), 0)""",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes and understands."""

_SCHEMA_TABLE = """CREATE TABLE IF NOT EXISTS ik_schema (
    version INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL
)"""


def stored_version(conn: sqlite3.Connection) -> int:
    """The highest applied migration (0 for a database without our schema)."""
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ik_schema'"
    ).fetchone()
    if found is None:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM ik_schema").fetchone()
    return int(row[0])


def _refuse_newer(version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StoreSchemaError(
            "the database was written by a newer version of intention-kernel",
            code=ErrorCode.STORE_SCHEMA_TOO_NEW,
            context={"found": version, "supported": SCHEMA_VERSION},
        )


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema to ``SCHEMA_VERSION``; returns the version found before."""
    version = stored_version(conn)
    _refuse_newer(version)
    if version == SCHEMA_VERSION:
        return version
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_SCHEMA_TABLE)
        version = stored_version(conn)  # another process may have migrated meanwhile
        _refuse_newer(version)
        now = datetime.now(UTC).isoformat()
        for number in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[number - 1]:
                conn.execute(statement)
            conn.execute("INSERT INTO ik_schema (version, applied_at) VALUES (?, ?)", (number, now))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return version
