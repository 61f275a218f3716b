"""The ``OutboxSource`` half of ``PostgresDurability``: delivery state on the outbox rows.

Every method is one statement, so one short transaction; no transaction stays open while a sink
publishes. Times come from the server clock (``now()``, the statement's transaction start).

Positions come from a ``bigserial`` taken at INSERT time, not at COMMIT: across threads a lower
position can become visible after a higher one. Within a thread they follow commit order (the
lease and the head revision serialize a thread's commits, and a turn inserts its events in
sequence order), which is all the claim rule needs: it compares positions only within a thread.

``claim`` walks the undelivered rows in position order against the statement's snapshot, one
index probe per step, and stops when the batch is full: a thread is held back from its first
row that is dead, live-claimed or backing off, and its later rows are skipped. Its cost is the
batch plus the held-back threads, whatever the backlog or the planner's statistics. The taken
rows are then locked with ``FOR UPDATE SKIP LOCKED`` (relays never wait on each other), and a
row is kept only if no earlier taken row of its thread was skipped: SKIP LOCKED silently skips
rows another transaction holds (a concurrent claim, mark or failure), and without that check a
skipped row would let a later row of its thread out of order. A claimed row that cannot be
read back is dead-lettered at once (its reason in ``last_error``) with the rest of its thread's
batch given back, so it holds back its own thread only; reads list it as a placeholder.

Wake-up (optional, off by default): ``set_outbox_notify(True)`` installs a statement trigger
that sends ``NOTIFY`` when a commit inserts outbox rows; a store opened with ``listen=True``
keeps one dedicated connection (outside the pool) in ``LISTEN`` and ``wait_for_events`` returns
early on a notification. Both are hints: relays keep polling, and a missed notification only
costs one poll interval. ``LISTEN`` is refused behind a transaction-mode pooler (PgBouncer),
detected by a notification that never comes back at start.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import zlib
from typing import Any

import asyncpg

from ...contracts.errors import (
    CheckpointCorruptError,
    ConfigurationError,
    DurabilityError,
    ErrorCode,
)
from ...contracts.events import KernelEvent, StoredEvent
from ...contracts.outbox import OutboxStats
from .._documents import decode_model, unreadable, unreadable_event
from ._connection import PgConnection

__all__ = [
    "EVENT_COLUMNS",
    "OutboxStatements",
    "PostgresNotifier",
    "PostgresOutbox",
    "notify_channel",
]

log = logging.getLogger("intention_kernel.postgres")

_PROBE_TIMEOUT = 2.0
_RECONNECT_EVERY = 5.0
EVENT_COLUMNS = (
    "position, event, delivered_at, attempts, last_error, dead, thread_id, turn_id, sequence"
)
"""``SELECT`` these for ``stored_event``."""
_RETURNING = EVENT_COLUMNS
# An init-plan: evaluated once per statement, transaction-local (works behind a pooler).
_SYNC_ON = "(SELECT set_config('synchronous_commit', 'on', true)) IS NOT NULL"
# "Not delivered yet" for statements that find rows by position: written so that it does not
# match the predicate of the partial indexes on undelivered rows. With a healthy store's
# statistics (analyzed while nothing was pending) those indexes look empty, and the planner
# scanned all of ``outbox_open_by_thread`` instead of probing the primary key: every mark,
# release and failure then cost O(backlog), and draining a backlog O(backlog^2).
_OPEN = "(delivered_at IS NULL) IS TRUE"
# An undelivered row ``o`` that holds back its thread: dead, claimed or backing off.
_BLOCKED = (
    "(o.dead OR coalesce(o.claimed_until > now(), false)"
    " OR coalesce(o.next_attempt_at > now(), false))"
)


def notify_channel(schema: str) -> str:
    """A short channel name per schema (channel names are limited to 63 bytes)."""
    return f"ik_outbox_{zlib.crc32(schema.encode()):08x}"


def stored_event(row: Any) -> StoredEvent:
    """A ``StoredEvent`` with its delivery state from a row of ``EVENT_COLUMNS``; an
    unreadable document as a placeholder from the row's columns, ``corrupt`` saying why."""
    corrupt = None
    try:
        event = decode_model(
            KernelEvent, row["event"], what="outbox event", position=row["position"]
        )
    except CheckpointCorruptError as exc:
        corrupt = unreadable(exc)
        event = unreadable_event(
            position=row["position"],
            thread_id=row["thread_id"],
            turn_id=row["turn_id"],
            sequence=row["sequence"],
            reason=corrupt,
        )
    return StoredEvent(
        event=event,
        position=row["position"],
        delivered_at=row["delivered_at"],
        attempts=row["attempts"],
        last_error=row["last_error"],
        dead=row["dead"],
        corrupt=corrupt,
    )


class OutboxStatements:
    """The outbox statements of one schema, rendered once."""

    def __init__(self, schema: str) -> None:
        q, channel = f'"{schema}"', notify_channel(schema)
        s = f"{q}.outbox"
        # The transition table skips turns that committed no event (a statement trigger fires
        # even when the INSERT wrote no row).
        self.notify_on = f"""
CREATE OR REPLACE FUNCTION {q}.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted) THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS outbox_notify ON {s};
CREATE TRIGGER outbox_notify AFTER INSERT ON {s}
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION {q}.outbox_notify();
"""
        self.notify_off = f"""
DROP TRIGGER IF EXISTS outbox_notify ON {s};
DROP FUNCTION IF EXISTS {q}.outbox_notify();
"""
        self.notify_state = (
            "SELECT EXISTS (SELECT 1 FROM pg_trigger"
            f" WHERE tgrelid = to_regclass('{q}.outbox') AND tgname = 'outbox_notify')"
        )
        # $1 relay id, $2 limit, $3 lease seconds. ``walk`` visits undelivered rows in position
        # order, one ``outbox_open`` index probe per step, carrying the threads held back so
        # far (their later rows are skipped inside the probe) and stopping once $2 rows are
        # taken: its cost is the batch plus the held-back threads, whatever the backlog and the
        # statistics (a plain join let the planner test every undelivered row first).
        self.claim = f"""
WITH RECURSIVE walk (position, thread_id, take, taken, held) AS (
    (SELECT o.position, o.thread_id, NOT {_BLOCKED}, (NOT {_BLOCKED})::int,
            CASE WHEN {_BLOCKED} THEN ARRAY[o.thread_id] ELSE '{{}}'::text[] END
     FROM {s} o WHERE o.delivered_at IS NULL ORDER BY o.position LIMIT 1)
    UNION ALL
    SELECT n.position, n.thread_id, NOT n.blocked, w.taken + (NOT n.blocked)::int,
           CASE WHEN n.blocked THEN w.held || n.thread_id ELSE w.held END
    FROM walk w CROSS JOIN LATERAL (
        SELECT o.position, o.thread_id, {_BLOCKED} AS blocked FROM {s} o
        WHERE o.delivered_at IS NULL AND o.position > w.position
          AND o.thread_id <> ALL (w.held)
        ORDER BY o.position LIMIT 1) n
    WHERE w.taken < $2
), candidates AS (
    SELECT r.position, r.thread_id FROM walk w CROSS JOIN LATERAL (
        SELECT o.position, o.thread_id FROM {s} o
        WHERE o.position = w.position AND (o.delivered_at IS NULL) IS TRUE AND NOT {_BLOCKED}
        FOR UPDATE SKIP LOCKED) r
    WHERE w.take
), missing AS (
    SELECT w.thread_id, min(w.position) AS first FROM walk w
    WHERE w.take AND NOT EXISTS (SELECT 1 FROM candidates k WHERE k.position = w.position)
    GROUP BY w.thread_id
), chosen AS (
    SELECT c.position FROM candidates c LEFT JOIN missing m ON m.thread_id = c.thread_id
    WHERE m.first IS NULL OR c.position < m.first
)
UPDATE {s} u SET claimed_by = $1, claimed_until = now() + make_interval(secs => $3::float8)
FROM chosen WHERE u.position = chosen.position
RETURNING u.position, u.event, u.delivered_at, u.attempts, u.last_error, u.dead, u.thread_id,
    u.turn_id, u.sequence"""
        # $1 position, $2 relay, $3 reason: an unreadable row this relay just claimed.
        self.kill_unreadable = f"""
UPDATE {s} SET dead = true, last_error = $3, claimed_by = NULL, claimed_until = NULL,
    next_attempt_at = NULL
WHERE position = $1 AND claimed_by = $2 AND {_OPEN} AND {_SYNC_ON}"""
        # $1 positions. Durable: a lost mark would only re-deliver, but an acked batch should
        # stay acked across a server crash.
        self.mark_delivered = f"""
UPDATE {s} SET delivered_at = now(), dead = false, claimed_by = NULL, claimed_until = NULL,
    next_attempt_at = NULL
WHERE position = ANY($1::bigint[]) AND {_OPEN} AND {_SYNC_ON}"""
        # $1 position, $2 relay, $3 error, $4 retry seconds, $5 max attempts, $6 permanent.
        self.record_failure = f"""
UPDATE {s} SET attempts = attempts + 1, last_error = $3,
    claimed_by = NULL, claimed_until = NULL,
    dead = ($6::bool OR attempts + 1 >= $5::int),
    next_attempt_at = CASE WHEN $6::bool OR attempts + 1 >= $5::int THEN NULL
                           ELSE now() + make_interval(secs => $4::float8) END
WHERE position = $1 AND {_OPEN} AND NOT dead
  AND claimed_by = $2 AND claimed_until > now()
RETURNING {_RETURNING}"""
        self.release = f"""
UPDATE {s} SET claimed_by = NULL, claimed_until = NULL
WHERE position = ANY($1::bigint[]) AND {_OPEN} AND NOT dead
  AND claimed_by = $2 AND claimed_until > now()"""
        # $1 positions or NULL (all), $2 thread or NULL (all).
        self.requeue = f"""
UPDATE {s} SET dead = false, attempts = 0, next_attempt_at = NULL,
    claimed_by = NULL, claimed_until = NULL
WHERE dead AND ($1::bigint[] IS NULL OR position = ANY($1::bigint[]))
  AND ($2::text IS NULL OR thread_id = $2::text)"""
        self.dead_letters = f"SELECT {_RETURNING} FROM {s} WHERE dead ORDER BY position LIMIT $1"
        self.prune = f"""
DELETE FROM {s}
WHERE delivered_at IS NOT NULL AND delivered_at < now() - make_interval(secs => $1::float8)"""
        # One statement, one snapshot. The oldest pending event is looked for among each
        # thread's first pending event only (positions are not ordered across threads).
        # ``stats_tolerant`` reads the times through the schema's non-failing parsers: used
        # when a pending row is not JSON (until a claim dead-letters it).
        self.stats_tolerant = self._stats(
            s, f"{q}.timestamptz_or_null({q}.json_or_null(h.event) ->> 'occurred_at')"
        )
        self.stats = self._stats(s, "(h.event::json ->> 'occurred_at')::timestamptz")

    @staticmethod
    def _stats(s: str, occurred_at: str) -> str:
        return f"""
SELECT
    (SELECT count(*) FROM {s} WHERE delivered_at IS NULL AND NOT dead) AS pending,
    (SELECT count(*) FROM {s}
      WHERE delivered_at IS NULL AND NOT dead AND claimed_until > now()) AS claimed,
    (SELECT count(*) FROM {s} WHERE dead) AS dead,
    (SELECT count(DISTINCT thread_id) FROM {s} WHERE dead) AS blocked_threads,
    (SELECT count(*) FROM {s} WHERE delivered_at IS NOT NULL) AS delivered,
    (SELECT extract(epoch FROM now() - min({occurred_at}))
       FROM (SELECT DISTINCT ON (thread_id) event FROM {s}
             WHERE delivered_at IS NULL AND NOT dead
             ORDER BY thread_id, position) h)::float8 AS oldest_age"""


class PostgresOutbox:
    """``OutboxStorage`` over the ``outbox`` table (the facade has checked the arguments)."""

    def __init__(self, db: PgConnection, sql: OutboxStatements) -> None:
        self._db = db
        self._outbox_sql = sql

    async def claim(self, relay_id: str, limit: int, lease: float) -> list[StoredEvent]:
        rows = await self._db.fetch(self._outbox_sql.claim, relay_id, limit, lease)
        claimed = sorted((stored_event(r) for r in rows), key=lambda e: e.position)
        if all(e.corrupt is None for e in claimed):
            return claimed
        events: list[StoredEvent] = []
        given_back: list[int] = []
        broken: set[str] = set()  # threads held back by an unreadable row of this batch
        for stored in claimed:
            thread_id = stored.event.thread_id
            if thread_id in broken:
                given_back.append(stored.position)
            elif stored.corrupt is not None:
                await self._db.execute_status(
                    self._outbox_sql.kill_unreadable, stored.position, relay_id, stored.corrupt
                )
                broken.add(thread_id)
            else:
                events.append(stored)
        if given_back:
            await self._db.execute_status(self._outbox_sql.release, given_back, relay_id)
        return events

    async def mark_delivered(self, relay_id: str, positions: list[int]) -> int:
        return await self._db.execute_status(self._outbox_sql.mark_delivered, positions)

    async def record_failure(
        self,
        relay_id: str,
        position: int,
        error: str,
        retry_in: float,
        max_attempts: int,
        permanent: bool,
    ) -> StoredEvent | None:
        row = await self._db.fetchrow(
            self._outbox_sql.record_failure,
            position,
            relay_id,
            error,
            retry_in,
            max_attempts,
            permanent,
        )
        return None if row is None else stored_event(row)

    async def release(self, relay_id: str, positions: list[int]) -> int:
        return await self._db.execute_status(self._outbox_sql.release, positions, relay_id)

    async def requeue(self, positions: list[int] | None, thread_id: str | None) -> int:
        return await self._db.execute_status(self._outbox_sql.requeue, positions, thread_id)

    async def dead_letters(self, limit: int) -> list[StoredEvent]:
        rows = await self._db.fetch(self._outbox_sql.dead_letters, limit)
        return [stored_event(r) for r in rows]

    async def prune(self, older_than: float) -> int:
        return await self._db.execute_status(self._outbox_sql.prune, older_than)

    async def stats(self) -> OutboxStats:
        try:
            row = await self._db.fetchrow(self._outbox_sql.stats)
        except DurabilityError as exc:
            if not str(exc.context.get("sqlstate", "")).startswith("22"):
                raise
            row = await self._db.fetchrow(self._outbox_sql.stats_tolerant)  # an unreadable row
        age = row["oldest_age"]
        return OutboxStats(
            pending=row["pending"],
            claimed=row["claimed"],
            dead=row["dead"],
            delivered=row["delivered"],
            oldest_pending_age=None if age is None else max(0.0, float(age)),
            blocked_threads=row["blocked_threads"],
        )


class PostgresNotifier:
    """``OutboxNotifier``: the optional ``LISTEN`` wake-up of relays (the facade checks that
    the store is open)."""

    def __init__(self, db: PgConnection, sql: OutboxStatements) -> None:
        self._db = db
        self._outbox_sql = sql
        self.schema = db.schema
        self._listen_dsn: str | None = None
        self._listener: Any = None
        self._notified: asyncio.Event | None = None
        self._reconnect_at = 0.0

    async def set_outbox_notify(self, enabled: bool) -> None:
        """Install (or drop) the trigger that NOTIFYs listening relays when a commit inserts
        outbox events. It adds work to every commit that writes events (see
        ``docs/postgres.md`` for the measured cost), so it is off unless turned on here."""
        sql = self._outbox_sql.notify_on if enabled else self._outbox_sql.notify_off
        await self._db.execute(sql)

    async def outbox_notify_enabled(self) -> bool:
        row = await self._db.fetchrow(self._outbox_sql.notify_state)
        return bool(row[0])

    async def start_listener(self, dsn: str) -> None:
        """Open the dedicated LISTEN connection and check that a notification comes back; a
        transaction-mode pooler would lose it, so such a setup is refused at start."""
        self._listen_dsn = dsn
        if not await self._open_listener():
            raise ConfigurationError(
                "LISTEN does not work through this connection (a transaction-mode pooler such"
                " as PgBouncer?): open without listen=True, relays then poll",
                code=ErrorCode.INVALID_CONFIGURATION,
                context={"setting": "listen"},
            )

    async def _open_listener(self) -> bool:
        """Connect, LISTEN, and send a probe through the pool; False if it never arrives."""
        assert self._listen_dsn is not None
        channel = notify_channel(self.schema)
        event = asyncio.Event()
        token = f"probe-{secrets.token_hex(8)}"
        probe = asyncio.Event()

        def heard(conn: Any, pid: int, name: str, payload: str) -> None:
            if payload == token:
                probe.set()
            else:
                event.set()

        conn = await asyncpg.connect(self._listen_dsn, statement_cache_size=0, timeout=5)
        try:
            await conn.add_listener(channel, heard)
            await self._db.execute("SELECT pg_notify($1, $2)", channel, token)
            await asyncio.wait_for(probe.wait(), _PROBE_TIMEOUT)
        except TimeoutError:
            await conn.close()
            return False
        except BaseException:
            await conn.close()
            raise
        event.set()  # events may have committed while no connection listened
        self._listener, self._notified = conn, event
        return True

    async def wait_for_events(self, max_wait: float) -> None:
        """Return on a notification (or one that came while the relay was busy) or after
        ``max_wait`` seconds. Without ``listen=True``, or while the LISTEN connection is down,
        this is a plain sleep: relays poll."""
        if self._listen_dsn is None:
            await asyncio.sleep(max_wait)
            return
        loop = asyncio.get_running_loop()
        if (self._listener is None or self._listener.is_closed()) and loop.time() >= (
            self._reconnect_at
        ):
            self._reconnect_at = loop.time() + _RECONNECT_EVERY
            await self.stop_listener(keep_dsn=True)
            try:
                await self._open_listener()
            except Exception as exc:  # keep polling; try again later
                log.warning("outbox LISTEN connection not reopened: %r", exc)
        event = self._notified
        if event is None or self._listener is None or self._listener.is_closed():
            await asyncio.sleep(max_wait)
            return
        if not event.is_set():
            try:
                await asyncio.wait_for(event.wait(), max_wait)
            except TimeoutError:
                return
        event.clear()

    async def stop_listener(self, *, keep_dsn: bool = False) -> None:
        conn, self._listener, self._notified = self._listener, None, None
        if not keep_dsn:
            self._listen_dsn = None
        if conn is not None and not conn.is_closed():
            await conn.close()
