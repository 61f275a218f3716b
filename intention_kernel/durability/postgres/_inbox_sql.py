"""The inbox's statements, rendered once per schema (``InboxStatements``).

Every statement is its own short transaction; the claim is one call of the schema's
``inbox_claim`` function (migration 6, see ``_inbox``). Submits, operator actions and renewals
take the thread's transaction-level advisory lock, the one the claim takes, so that a claim's
check under that lock sees them. Durable writes force ``synchronous_commit`` on per statement;
claims, renewals and progress are written without waiting for the flush (a lost one costs a
repeated claim or a progress item, never a promise).
"""

from __future__ import annotations

from .._inbox_rows import COLUMNS
from ._outbox_sql import notify_channel

__all__ = ["INBOX_NOTIFY_KINDS", "InboxStatements"]

INBOX_NOTIFY_KINDS = {
    "submit": (True, False),
    "pending": (True, True),
    "done": (False, True),
    "dead": (False, True),
    "progress": (False, True),
}
"""What each kind of inbox notification wakes: (workers, watchers). A submit wakes workers; a
request due again (a release for retry, an operator's retry) workers and watchers; a finished
request and a progress entry watchers."""
_NOTIFY_TRIGGERS = (
    ("inbox", "inbox_notify_submit"),
    ("inbox", "inbox_notify_state"),
    ("progress", "progress_notify"),
)

# Init-plans: evaluated once per statement, transaction-local (works behind a pooler).
_SYNC_ON = "(SELECT set_config('synchronous_commit', 'on', true)) IS NOT NULL"
_SYNC_OFF = "(SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL"
_OPEN = "('pending', 'running')"


def _columns(alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + c for c in COLUMNS)


class InboxStatements:
    """The inbox statements of one schema, rendered once."""

    def __init__(self, schema: str) -> None:
        q = f'"{schema}"'
        s, cols = f"{q}.inbox", _columns()
        committed = (
            f"SELECT EXISTS (SELECT 1 FROM {q}.turns WHERE thread_id = $1 AND turn_id = $2)"
            " AS committed"
        )
        # The thread's lock, as ``inbox_claim`` takes it (same keys: the schema's quoted name,
        # then the thread id). It returns void, which is not NULL.
        lock = f"pg_advisory_xact_lock(hashtext('{q}'), hashtext({{}})) IS NOT NULL"
        # $1 thread, $2 turn, $3 text, $4 payload, $5 fingerprint, $6 not_before or NULL.
        # The stored request, else the committed turn, else the new row (its position taken
        # under the thread's lock: a thread's positions follow the order its submits commit
        # in). No row at all: a concurrent submit of the id committed after this statement's
        # snapshot (ON CONFLICT saw it); the caller asks again.
        self.submit = f"""
WITH existing AS (
    SELECT {cols} FROM {s} WHERE thread_id = $1 AND turn_id = $2
), prior AS (
    SELECT fingerprint, true AS found FROM {q}.turns WHERE thread_id = $1 AND turn_id = $2
), written AS (
    INSERT INTO {s} (thread_id, turn_id, state, text, payload, fingerprint, submitted_at,
                     not_before)
    SELECT $1, $2, 'pending', $3, $4, $5, now(), coalesce($6::timestamptz, now())
    WHERE NOT EXISTS (SELECT 1 FROM existing) AND NOT EXISTS (SELECT 1 FROM prior)
      AND {lock.format("$1")} AND {_SYNC_ON}
    ON CONFLICT (thread_id, turn_id) DO NOTHING
    RETURNING {cols}
)
SELECT r.*, (SELECT count(*) FROM written) > 0 AS inserted,
       p.fingerprint AS committed_fingerprint, coalesce(p.found, false) AS committed
FROM (SELECT 1) AS one
LEFT JOIN (SELECT * FROM written UNION ALL SELECT * FROM existing) r ON true
LEFT JOIN prior p ON true"""
        # $1 thread, $2 turn, $3 text, $4 payload, $5 fingerprint, $6 worker, $7 ttl seconds,
        # $8 lease owner, $9 lease ttl seconds. The submit that claims (``inbox_submit_claimed``)
        # and, when it claimed, the thread's lease for the worker's turn with the checkpoint, as
        # the turn's acquire takes them (``_sql``): the worker's turn then opens without a
        # statement. The function made the transaction synchronous; nothing here turns that
        # off. No row: the id is taken (the caller submits as usual).
        self.submit_claimed = f"""
WITH r AS (
    SELECT * FROM {q}.inbox_submit_claimed($1, $2, $3, $4, $5, $6, $7::float8)
), seen AS (
    SELECT epoch, expires_at FROM {q}.leases WHERE thread_id = $1
), acquired AS (
    INSERT INTO {q}.leases AS l (thread_id, owner, epoch, expires_at)
    SELECT $1, $8, 1, clock_timestamp() + make_interval(secs => $9::float8)
    FROM r WHERE r.state = 'running' AND r.claimed_by = $6
    ON CONFLICT (thread_id) DO UPDATE
        SET owner = excluded.owner, epoch = l.epoch + 1, expires_at = excluded.expires_at
        WHERE l.expires_at <= clock_timestamp()
    RETURNING epoch
)
SELECT {_columns("r")}, a.epoch AS lease_epoch, (SELECT count(*) FROM seen) AS seen_rows,
       (SELECT e.epoch FROM seen e WHERE e.expires_at = '-infinity') AS released_epoch,
       NULL::text AS prior_result, NULL::text AS prior_fingerprint,
       h.revision AS head_revision, c.result AS head_result
FROM r
LEFT JOIN acquired a ON true
LEFT JOIN {q}.heads h ON h.thread_id = $1 AND a.epoch IS NOT NULL
LEFT JOIN {q}.turns c ON c.thread_id = $1 AND c.turn_id = h.turn_id"""
        # Arrays, one element per submit of distinct threads: $1 thread, $2 turn, $3 text,
        # $4 payload, $5 fingerprint, $6 worker, $7 ttl seconds, $8 lease owner; $9 lease ttl
        # seconds. ``submit_claimed`` for the submits that queued together (``_inbox``): one
        # row each, in their order, its request columns NULL where the id is taken. The
        # threads' locks are taken in thread order, as a renewal takes them: two of these
        # statements never wait for each other in a cycle.
        self.submit_claimed_group = f"""
WITH req AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                         $6::text[], $7::float8[], $8::text[])
        WITH ORDINALITY AS q(thread_id, turn_id, body, payload, fingerprint, worker, ttl,
                             owner, k)
), r AS MATERIALIZED (
    SELECT o.k, f.*
    FROM (SELECT * FROM req ORDER BY thread_id) o
    CROSS JOIN LATERAL {q}.inbox_submit_claimed(o.thread_id, o.turn_id, o.body, o.payload,
                                                 o.fingerprint, o.worker, o.ttl) f
), seen AS (
    SELECT q.k, l.epoch, l.expires_at FROM req q JOIN {q}.leases l ON l.thread_id = q.thread_id
), acquired AS (
    INSERT INTO {q}.leases AS l (thread_id, owner, epoch, expires_at)
    SELECT q.thread_id, q.owner, 1, clock_timestamp() + make_interval(secs => $9::float8)
    FROM req q JOIN r ON r.k = q.k
    WHERE r.state = 'running' AND r.claimed_by = q.worker
    ORDER BY q.thread_id
    ON CONFLICT (thread_id) DO UPDATE
        SET owner = excluded.owner, epoch = l.epoch + 1, expires_at = excluded.expires_at
        WHERE l.expires_at <= clock_timestamp()
    RETURNING l.thread_id, l.epoch
)
SELECT {_columns("r")}, a.epoch AS lease_epoch,
       (SELECT count(*) FROM seen e WHERE e.k = q.k) AS seen_rows,
       (SELECT e.epoch FROM seen e WHERE e.k = q.k AND e.expires_at = '-infinity')
           AS released_epoch,
       NULL::text AS prior_result, NULL::text AS prior_fingerprint,
       h.revision AS head_revision, c.result AS head_result
FROM req q
LEFT JOIN r ON r.k = q.k
LEFT JOIN acquired a ON a.thread_id = q.thread_id
LEFT JOIN {q}.heads h ON h.thread_id = q.thread_id AND a.epoch IS NOT NULL
LEFT JOIN {q}.turns c ON c.thread_id = q.thread_id AND c.turn_id = h.turn_id
ORDER BY q.k"""
        # $1 worker, $2 ttl seconds.
        self.claim = f"SELECT {cols} FROM {q}.inbox_claim($1, $2::float8)"
        # $1 position, $2 worker, $3 error code, $4 error: a claimed row that cannot be read.
        self.kill_unreadable = f"""
UPDATE {s} SET state = 'dead', claimed_by = NULL, claimed_until = NULL, finished_at = now(),
    error_code = $3, error = $4
WHERE position = $1 AND claimed_by = $2 AND state = 'running' AND {_SYNC_ON}"""
        # $1 worker, $2 ttl seconds. The thread's lock comes first and the expiry is read on
        # the clock after it: a claim that found this claim expired has committed by then, and
        # the renewal then finds it expired too. The locks are taken in thread order, as a
        # group submit takes them (in another order the two could wait for each other).
        self.renew = f"""
WITH mine AS MATERIALIZED (
    SELECT position, thread_id FROM {s} WHERE claimed_by = $1 AND state = 'running'
    ORDER BY thread_id
), locked AS MATERIALIZED (
    SELECT position FROM mine WHERE {lock.format("thread_id")}
)
UPDATE {s} SET claimed_until = clock_timestamp() + make_interval(secs => $2::float8)
WHERE position = ANY (ARRAY(SELECT position FROM locked)) AND claimed_by = $1
  AND state = 'running' AND claimed_until > clock_timestamp() AND {_SYNC_OFF}
RETURNING thread_id, turn_id"""
        # $1 worker, $2 thread, $3 turn, $4 retry seconds or NULL (dead), $5 code, $6 error.
        self.release = f"""
WITH committed AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM {q}.turns WHERE thread_id = $2 AND turn_id = $3) AS yes
)
UPDATE {s} u SET
    state = CASE WHEN c.yes THEN 'done' WHEN $4::float8 IS NULL THEN 'dead' ELSE 'pending' END,
    not_before = CASE WHEN c.yes OR $4::float8 IS NULL THEN u.not_before
                      ELSE now() + make_interval(secs => $4::float8) END,
    finished_at = CASE WHEN c.yes OR $4::float8 IS NULL THEN now() ELSE u.finished_at END,
    claimed_by = NULL, claimed_until = NULL, error_code = $5, error = $6
FROM committed c
WHERE u.thread_id = $2 AND u.turn_id = $3 AND u.state = 'running' AND u.claimed_by = $1
  AND u.claimed_until > now() AND {_SYNC_ON}
RETURNING {_columns("u")}"""
        # $1 thread, $2 turn.
        self.mark_done = f"""
WITH committed AS (
    SELECT 1 FROM {q}.turns WHERE thread_id = $1 AND turn_id = $2
), marked AS (
    UPDATE {s} SET state = 'done', finished_at = now(), claimed_by = NULL, claimed_until = NULL
    WHERE thread_id = $1 AND turn_id = $2 AND state <> 'done'
      AND EXISTS (SELECT 1 FROM committed) AND {_SYNC_ON}
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM committed) AS committed, (SELECT count(*) FROM marked) AS marked"""
        self.get = f"SELECT {cols} FROM {s} WHERE thread_id = $1 AND turn_id = $2"
        # On a read pool (``_replica``): the request (NULL columns for none) and whether this
        # server has the turn committed; settled there when done, or committed without one.
        self.get_settled = f"""
SELECT r.*, c.committed FROM ({committed}) c LEFT JOIN LATERAL ({self.get}) r ON true"""
        # $1 after position, $2 limit, then the filters given: state, thread (in that order).
        self.list_requests = {
            (by_state, by_thread): f"SELECT {cols} FROM {s} WHERE position > $1"
            + (" AND state = $3::text" if by_state else "")
            + (f" AND thread_id = ${3 + by_state}::text" if by_thread else "")
            + " ORDER BY position LIMIT $2"
            for by_state in (False, True)
            for by_thread in (False, True)
        }
        # $1 thread, $2 turn, $3 expected states, $4 new state, $5 new operator log, $6 the
        # operator log read before (a compare-and-set: the caller appended to it). Made due
        # again, a request counts its attempts from 0 again.
        self.operate = f"""
WITH committed AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM {q}.turns WHERE thread_id = $1 AND turn_id = $2) AS yes
)
UPDATE {s} u SET
    state = CASE WHEN c.yes THEN 'done' ELSE $4::text END,
    not_before = CASE WHEN NOT c.yes AND $4::text = 'pending' THEN now() ELSE u.not_before END,
    finished_at = CASE WHEN NOT c.yes AND $4::text = 'pending' THEN NULL ELSE now() END,
    attempts = CASE WHEN NOT c.yes AND $4::text = 'pending' THEN 0 ELSE u.attempts END,
    claimed_by = NULL, claimed_until = NULL, operator_log = $5
FROM committed c
WHERE u.thread_id = $1 AND u.turn_id = $2 AND u.state = ANY($3::text[])
  AND u.operator_log IS NOT DISTINCT FROM $6::text
  AND {lock.format("u.thread_id")} AND {_SYNC_ON}
RETURNING {_columns("u")}"""
        # One snapshot; open rows through the claim's partial indexes, dead ones through theirs.
        self.stats = f"""
SELECT count(*) FILTER (WHERE state = 'pending') AS pending,
       count(*) FILTER (WHERE state = 'running') AS running,
       min(submitted_at) FILTER (WHERE state = 'pending') AS oldest_pending_at,
       (SELECT count(*) FROM {s} WHERE state = 'dead') AS dead
FROM {s} WHERE state IN {_OPEN}"""
        p = f"{q}.progress"
        # $1 thread, $2 turn, $3 items. Two writers of one turn at once: the second one's
        # insert fails on the primary key and is sent again (``_inbox``).
        self.append_progress = f"""
WITH last AS (
    SELECT coalesce(max(seq), 0) AS seq FROM {p} WHERE thread_id = $1 AND turn_id = $2
), written AS (
    INSERT INTO {p} (thread_id, turn_id, seq, item, written_at)
    SELECT $1, $2, last.seq + i.n, i.item, now()
    FROM last, unnest($3::text[]) WITH ORDINALITY AS i(item, n)
    WHERE {_SYNC_OFF}
    RETURNING seq
)
SELECT max(seq) AS seq FROM written"""
        self.read_progress = f"""
SELECT seq, item FROM {p} WHERE thread_id = $1 AND turn_id = $2 AND seq > $3
ORDER BY seq LIMIT $4"""
        # On a read pool: the entries (one NULL row for none) and whether this server has the
        # turn committed, which writes the log's last entries: its log is then whole there.
        self.read_progress_settled = f"""
SELECT g.seq, g.item, c.committed FROM ({committed}) c
LEFT JOIN LATERAL ({self.read_progress}) g ON true ORDER BY g.seq"""
        # The newest entry of a turn that has not committed stays: its ``seq`` goes on from
        # there, so a watcher's cursor never points past a renumbered log.
        self.prune_progress = f"""
DELETE FROM {p} AS g WHERE g.written_at < $1 AND {_SYNC_OFF}
    AND (EXISTS (SELECT 1 FROM {q}.turns t WHERE t.thread_id = g.thread_id
                 AND t.turn_id = g.turn_id)
         OR g.seq < (SELECT max(n.seq) FROM {p} n WHERE n.thread_id = g.thread_id
                     AND n.turn_id = g.turn_id))"""
        self._notify(schema)

    def _notify(self, schema: str) -> None:
        """The optional NOTIFY triggers (``set_inbox_notify``). Row triggers with ``WHEN``:
        a statement that changes no inbox row (a direct run's commit) or only claims and
        renews does not call them. The payload is the kind, the thread and the turn, one per
        line (ids hold no control characters)."""
        q, channel = f'"{schema}"', notify_channel(schema, "inbox")
        s, p = f"{q}.inbox", f"{q}.progress"
        drop = "".join(
            f"DROP TRIGGER IF EXISTS {name} ON {q}.{table};\n" for table, name in _NOTIFY_TRIGGERS
        )
        self.notify_on = f"""
CREATE OR REPLACE FUNCTION {q}.inbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text := TG_ARGV[0];
BEGIN
    IF kind IS NULL THEN  -- a request's new state (progress rows have none)
        kind := NEW.state;
    END IF;
    PERFORM pg_notify('{channel}', kind || E'\\n' || NEW.thread_id || E'\\n' || NEW.turn_id);
    RETURN NULL;
END $$;
{drop}CREATE TRIGGER inbox_notify_submit AFTER INSERT ON {s} FOR EACH ROW
    WHEN (NEW.state = 'pending') EXECUTE FUNCTION {q}.inbox_notify('submit');
CREATE TRIGGER inbox_notify_state AFTER UPDATE OF state, not_before ON {s} FOR EACH ROW
    WHEN (NEW.state <> 'running' AND (OLD.state IS DISTINCT FROM NEW.state
          OR (NEW.state = 'pending' AND OLD.not_before IS DISTINCT FROM NEW.not_before)))
    EXECUTE FUNCTION {q}.inbox_notify();
CREATE TRIGGER progress_notify AFTER INSERT ON {p} FOR EACH ROW
    EXECUTE FUNCTION {q}.inbox_notify('progress');
"""
        self.notify_off = f"{drop}DROP FUNCTION IF EXISTS {q}.inbox_notify();\n"
        names = ", ".join(f"'{name}'" for _, name in _NOTIFY_TRIGGERS)
        self.notify_state = (
            f"SELECT count(*) = {len(_NOTIFY_TRIGGERS)} FROM pg_trigger WHERE tgname IN ({names})"
            f" AND tgrelid IN (to_regclass('{s}'), to_regclass('{p}'))"
        )
