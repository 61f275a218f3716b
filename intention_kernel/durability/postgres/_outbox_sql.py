"""The outbox's statements, rendered once per schema (``OutboxStatements``).

The claim walks undelivered rows by position with one index probe per step (``_outbox`` says
why); "not delivered yet" is written so that the planner probes the primary key instead of the
partial indexes on undelivered rows. Durable marks force ``synchronous_commit`` per statement.
"""

from __future__ import annotations

import zlib

__all__ = ["EVENT_COLUMNS", "OutboxStatements", "notify_channel", "partition_of"]

EVENT_COLUMNS = (
    "position, event, delivered_at, attempts, last_error, dead, thread_id, turn_id, sequence,"
    " revision"
)
"""``SELECT`` these for ``stored_event``."""
_RETURNING = EVENT_COLUMNS
_RETURNING_UPDATED = ", ".join(f"u.{column.strip()}" for column in EVENT_COLUMNS.split(","))
"""``EVENT_COLUMNS`` of the claim's updated rows (``u``)."""
# An init-plan: evaluated once per statement, transaction-local (works behind a pooler).
_SYNC_ON = "(SELECT set_config('synchronous_commit', 'on', true)) IS NOT NULL"
# "Not delivered yet" for statements that find rows by position: written so that it does not
# match the predicate of the partial indexes on undelivered rows. With a healthy store's
# statistics (analyzed while nothing was pending) those indexes look empty, and the planner
# scanned all of ``outbox_open_by_thread`` instead of probing the primary key: every mark,
# release and failure then cost O(backlog), and draining a backlog O(backlog^2).
_OPEN = "(delivered_at IS NULL) IS TRUE"
# "Not delivered yet" for reading a thread in order: the predicate of ``outbox_open_in_thread``
# (every revision is >= 0), which no other statement's condition implies.
_IN_THREAD = "(o.delivered_at IS NULL) IS TRUE AND o.revision >= 0"
# An undelivered row ``o`` that holds back its thread: dead, claimed or backing off.
_BLOCKED = (
    "(o.dead OR coalesce(o.claimed_until > now(), false)"
    " OR coalesce(o.next_attempt_at > now(), false))"
)


def partition_of(count: int, column: str = "thread_id") -> str:
    """The partition of a row's thread among ``count``, as the index ``outbox_open_in_N`` and
    the claims of ``claim_in`` write it (the same text, so the planner matches them)."""
    return f"mod(mod(hashtext({column}), {count}) + {count}, {count})"


def notify_channel(schema: str, topic: str = "outbox") -> str:
    """A short channel name per schema and topic (``outbox``, ``inbox``; channel names are
    limited to 63 bytes)."""
    return f"ik_{topic}_{zlib.crc32(schema.encode()):08x}"


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
        self._s = s
        self._claims_in: dict[int, str] = {}
        self.claim = self._claim("")
        # $1 relay, $2 count, $3 index, $4 lease seconds: the lease taken or renewed if free,
        # expired or its own (``mine``), and the other partitions live in the same snapshot.
        self.hold_partition = f"""
WITH took AS (
    INSERT INTO {q}.relay_partitions AS p (partitions, partition, holder, held_until)
    VALUES ($2, $3, $1, now() + make_interval(secs => $4::float8))
    ON CONFLICT (partitions, partition) DO UPDATE
        SET holder = excluded.holder, held_until = excluded.held_until
        WHERE p.holder = excluded.holder OR p.held_until <= now()
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM took) AS mine,
       array(SELECT partition FROM {q}.relay_partitions
             WHERE partitions = $2 AND partition <> $3 AND held_until > now()) AS live"""
        self.partition_leases = f"""
SELECT partitions, partition, holder, held_until, held_until > now() AS live
FROM {q}.relay_partitions ORDER BY partitions, partition"""
        self.release_partition = f"""
DELETE FROM {q}.relay_partitions WHERE partitions = $2 AND partition = $3 AND holder = $1"""
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
        # thread's first pending event only (positions do not order threads).
        # ``stats_tolerant`` reads the times through the schema's non-failing parsers: used
        # when a pending row is not JSON (until a claim dead-letters it).
        self.stats_tolerant = self._stats(
            s, f"{q}.timestamptz_or_null({q}.json_or_null(h.event) ->> 'occurred_at')"
        )
        self.stats = self._stats(s, "(h.event::json ->> 'occurred_at')::timestamptz")

    def claim_in(self, count: int) -> str:
        """The claim of one partition of ``count`` ($4: its index), probing the index
        ``outbox_open_in_{count}`` (``partition_index``), so the rows of other partitions cost
        nothing however large their backlog."""
        found = self._claims_in.get(count)
        if found is None:
            found = self._claims_in[count] = self._claim(
                f"AND {partition_of(count, 'o.thread_id')} = $4"
            )
        return found

    def partition_index(self, count: int) -> str:
        """Build ``outbox_open_in_{count}`` unless it exists: the undelivered rows by partition
        and position. One builder at a time per schema and count (an advisory lock), and the
        build holds commits back while it scans the outbox (see docs/relay.md)."""
        s = self._s
        schema_key = s.replace("'", "''")
        return f"""
DO $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('{schema_key}.relay_partitions'), {count});
    CREATE INDEX IF NOT EXISTS outbox_open_in_{count}
        ON {s} (({partition_of(count)}), position) WHERE delivered_at IS NULL;
END $$"""

    def _claim(self, served: str) -> str:
        """$1 relay id, $2 limit, $3 lease seconds (and what ``served`` uses). ``walk`` visits
        undelivered rows in position order, one index probe per step (``outbox_open``, or the
        partition's index), carrying the threads held back so far (their later rows are
        skipped inside the probe) and stopping once $2 rows are taken: its cost is the batch
        plus the held-back threads, whatever the backlog and the statistics (a plain join let
        the planner test every undelivered row first).

        The walk counts how many rows each thread gives; those are then the thread's first
        rows in thread order (``expected``: ``outbox_open_in_thread``, ``(revision,
        sequence)``), whatever their positions. Positions numbered in thread order (one
        database) make them the rows walked; positions numbered apart (writers on several
        nodes) cannot reorder a thread: ``expected`` is locked and checked again, and a
        thread's batch ends before its first row that is held back or taken by another
        transaction."""
        s = self._s
        return f"""
WITH RECURSIVE walk (position, thread_id, take, taken, held) AS (
    (SELECT o.position, o.thread_id, NOT {_BLOCKED}, (NOT {_BLOCKED})::int,
            CASE WHEN {_BLOCKED} THEN ARRAY[o.thread_id] ELSE '{{}}'::text[] END
     FROM {s} o WHERE o.delivered_at IS NULL {served}
     ORDER BY o.position LIMIT 1)
    UNION ALL
    SELECT n.position, n.thread_id, NOT n.blocked, w.taken + (NOT n.blocked)::int,
           CASE WHEN n.blocked THEN w.held || n.thread_id ELSE w.held END
    FROM walk w CROSS JOIN LATERAL (
        SELECT o.position, o.thread_id, {_BLOCKED} AS blocked FROM {s} o
        WHERE o.delivered_at IS NULL AND o.position > w.position
          AND o.thread_id <> ALL (w.held) {served}
        ORDER BY o.position LIMIT 1) n
    WHERE w.taken < $2
), counts AS (
    SELECT w.thread_id, count(*) AS n FROM walk w WHERE w.take GROUP BY w.thread_id
), expected AS (
    SELECT c.thread_id, x.position,
           row_number() OVER (PARTITION BY c.thread_id ORDER BY x.revision, x.sequence) AS rank
    FROM counts c CROSS JOIN LATERAL (
        SELECT o.position, o.revision, o.sequence FROM {s} o
        WHERE o.thread_id = c.thread_id AND {_IN_THREAD}
        ORDER BY o.revision, o.sequence LIMIT c.n) x
), candidates AS (
    SELECT e.thread_id, e.rank, r.position FROM expected e CROSS JOIN LATERAL (
        SELECT o.position FROM {s} o
        WHERE o.position = e.position AND o.thread_id = e.thread_id
          AND {_OPEN} AND NOT {_BLOCKED}
        FOR UPDATE SKIP LOCKED) r
), missing AS (
    SELECT e.thread_id, min(e.rank) AS first FROM expected e
    WHERE NOT EXISTS (SELECT 1 FROM candidates k
                      WHERE k.position = e.position AND k.thread_id = e.thread_id)
    GROUP BY e.thread_id
), chosen AS (
    SELECT c.position, c.thread_id FROM candidates c
    LEFT JOIN missing m ON m.thread_id = c.thread_id
    WHERE m.first IS NULL OR c.rank < m.first
)
UPDATE {s} u SET claimed_by = $1, claimed_until = now() + make_interval(secs => $3::float8)
FROM chosen WHERE u.position = chosen.position AND u.thread_id = chosen.thread_id
RETURNING {_RETURNING_UPDATED}"""

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
       FROM (SELECT DISTINCT ON (o.thread_id) o.event FROM {s} o
             WHERE {_IN_THREAD} AND NOT o.dead
             ORDER BY o.thread_id, o.revision, o.sequence) h)::float8 AS oldest_age"""
