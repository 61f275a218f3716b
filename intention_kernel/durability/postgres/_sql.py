"""The statements of the PostgreSQL store, rendered once per schema.

Each write is one statement (its own short transaction) that checks the lease epoch and owner,
and that the lease was not released, in the same statement (``fence`` locks the lease row
``FOR SHARE``, so a takeover waits for it to commit and then sees its effects). The commit
also releases the lease, in its own transaction: a no-effect turn is two statements (acquire,
commit) and no crash can leave a committed turn's lease to expire by its TTL.
``set_config(..., true)`` applies to that statement's transaction only, so it also works behind
a transaction-mode pooler: ledger writes and commits are synchronous (``on``) whatever the
server default; lease bookkeeping is not (``off``) because the owner token makes a lost lease
write harmless (see ``docs/postgres.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Statements"]

_SYNC_ON = "set_config('synchronous_commit', 'on', true) IS NOT NULL"
_SYNC_OFF = "set_config('synchronous_commit', 'off', true) IS NOT NULL"


@dataclass(frozen=True, slots=True)
class Statements:
    acquire: str
    acquire_group: str
    load: str
    find_turn: str
    replay: str
    renew_group: str
    release: str
    release_owner: str
    read_receipt: str
    prepare_receipt: str
    write_receipt: str
    commit: str
    commit_group: str
    after_commit: str
    fencing: bool = True
    """Whether writes check the lease (and a lost lease cancels the turn)."""

    @classmethod
    def render(cls, schema: str, *, fencing: bool = True) -> Statements:
        s = f'"{schema}"'
        # ``fencing=False`` only for a test store that shows the fault tests catch it.
        # A released lease ('-infinity') fences too: a write that arrives after its own
        # release (sent just before a cancel, run after the release) must not land.
        fence = (
            f"SELECT 1 AS ok FROM {s}.leases WHERE thread_id = $1 AND epoch = $2"
            " AND owner = $3 AND expires_at <> '-infinity' FOR SHARE"
            if fencing
            else "SELECT 1 AS ok WHERE $1::text = $1 AND $2::bigint = $2 AND $3::text = $3"
        )
        # The commit releases the row it fenced on: locked for that update from the start (a
        # share lock upgraded later could deadlock with another upgrader).
        commit_fence = fence.replace(" FOR SHARE", " FOR NO KEY UPDATE")
        # The rows of a group commit whose lease holds, locked in thread order (two groups
        # never wait for each other in a cycle).
        group_fence = (
            f"SELECT r.k FROM req r JOIN {s}.leases l ON l.thread_id = r.thread_id"
            " AND l.epoch = r.epoch AND l.owner = r.owner AND l.expires_at <> '-infinity'"
            " ORDER BY r.thread_id FOR NO KEY UPDATE OF l"
            if fencing
            else "SELECT r.k FROM req r"
        )
        return cls(
            # $1 thread, $2 turn (or ''), $3 owner, $4 ttl seconds, $5 skip when committed.
            # One statement: the committed turn (replay) or the lease plus the checkpoint.
            acquire=f"""
WITH prior AS (
    SELECT result, fingerprint FROM {s}.turns WHERE thread_id = $1 AND turn_id = $2
), seen AS (
    SELECT epoch, expires_at FROM {s}.leases WHERE thread_id = $1
), acquired AS (
    INSERT INTO {s}.leases AS l (thread_id, owner, epoch, expires_at)
    SELECT $1, $3, 1, clock_timestamp() + make_interval(secs => $4::float8)
    WHERE NOT ($5::bool AND EXISTS (SELECT 1 FROM prior)) AND {_SYNC_OFF}
    ON CONFLICT (thread_id) DO UPDATE
        SET owner = excluded.owner, epoch = l.epoch + 1, expires_at = excluded.expires_at
        WHERE l.expires_at <= clock_timestamp()
    RETURNING epoch
)
SELECT a.epoch,
       (SELECT count(*) FROM seen) AS seen_rows,
       (SELECT e.epoch FROM seen e WHERE e.expires_at = '-infinity') AS released_epoch,
       p.result AS prior_result, p.fingerprint AS prior_fingerprint,
       h.revision AS head_revision, c.result AS head_result
FROM (SELECT 1) AS one
LEFT JOIN acquired a ON true
LEFT JOIN prior p ON true
LEFT JOIN {s}.heads h ON h.thread_id = $1 AND a.epoch IS NOT NULL AND p.result IS NULL
LEFT JOIN {s}.turns c ON c.thread_id = $1 AND c.turn_id = h.turn_id""",
            # $1 threads (distinct), $2 turns, $3 owners, $4 ttl seconds, $5 skip when committed:
            # ``acquire`` for several threads at once, one row per thread in their order, each
            # with its own outcome. Leases are taken in thread order (two groups never wait for
            # each other in a cycle).
            acquire_group=f"""
WITH req AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $5::bool[])
        WITH ORDINALITY AS r(thread_id, turn_id, owner, skip, k)
), prior AS (
    SELECT r.k, t.result, t.fingerprint
    FROM req r JOIN {s}.turns t ON t.thread_id = r.thread_id AND t.turn_id = r.turn_id
), seen AS (
    SELECT r.k, l.epoch, l.expires_at FROM req r JOIN {s}.leases l ON l.thread_id = r.thread_id
), acquired AS (
    INSERT INTO {s}.leases AS l (thread_id, owner, epoch, expires_at)
    SELECT r.thread_id, r.owner, 1, clock_timestamp() + make_interval(secs => $4::float8)
    FROM req r
    WHERE NOT (r.skip AND EXISTS (SELECT 1 FROM prior p WHERE p.k = r.k)) AND {_SYNC_OFF}
    ORDER BY r.thread_id
    ON CONFLICT (thread_id) DO UPDATE
        SET owner = excluded.owner, epoch = l.epoch + 1, expires_at = excluded.expires_at
        WHERE l.expires_at <= clock_timestamp()
    RETURNING l.thread_id, l.epoch
)
SELECT a.epoch,
       (SELECT count(*) FROM seen e WHERE e.k = r.k) AS seen_rows,
       (SELECT e.epoch FROM seen e WHERE e.k = r.k AND e.expires_at = '-infinity')
           AS released_epoch,
       p.result AS prior_result, p.fingerprint AS prior_fingerprint,
       h.revision AS head_revision, c.result AS head_result
FROM req r
LEFT JOIN acquired a ON a.thread_id = r.thread_id
LEFT JOIN prior p ON p.k = r.k
LEFT JOIN {s}.heads h ON h.thread_id = r.thread_id AND a.epoch IS NOT NULL AND p.result IS NULL
LEFT JOIN {s}.turns c ON c.thread_id = r.thread_id AND c.turn_id = h.turn_id
ORDER BY r.k""",
            load=f"""
SELECT p.result AS prior_result, p.fingerprint AS prior_fingerprint,
       h.revision AS head_revision, c.result AS head_result
FROM (SELECT 1) AS one
LEFT JOIN {s}.turns p ON p.thread_id = $1 AND p.turn_id = $2
LEFT JOIN {s}.heads h ON h.thread_id = $1
LEFT JOIN {s}.turns c ON c.thread_id = $1 AND c.turn_id = h.turn_id""",
            find_turn=f"SELECT result, fingerprint FROM {s}.turns "
            "WHERE thread_id = $1 AND turn_id = $2",
            # A read-only session (a standby, ``default_transaction_read_only``): a plain
            # SELECT, so a committed turn replays where ``acquire`` (it writes) cannot run.
            replay=f"SELECT result AS prior_result, fingerprint AS prior_fingerprint"
            f" FROM {s}.turns WHERE thread_id = $1 AND turn_id = $2",
            # $1 threads, $2 epochs, $3 owners, $4 ttl: every lease still held renewed in one
            # statement; the owners renewed come back (one per acquisition). The rows are
            # locked in thread order, as every statement that locks several leases does (a
            # group acquire of another process may want the same rows: no cycle); a row is
            # locked only if it is still held by that epoch and owner (checked again on the
            # row's latest version), and stays so until the update.
            renew_group=f"""
WITH held AS (
    SELECT l.thread_id FROM {s}.leases l
    JOIN unnest($1::text[], $2::int8[], $3::text[]) AS r(thread_id, epoch, owner)
        ON l.thread_id = r.thread_id AND l.epoch = r.epoch AND l.owner = r.owner
    WHERE l.expires_at <> '-infinity'
    ORDER BY l.thread_id FOR NO KEY UPDATE OF l
)
UPDATE {s}.leases l SET expires_at = clock_timestamp() + make_interval(secs => $4::float8)
FROM held h WHERE l.thread_id = h.thread_id AND {_SYNC_OFF}
RETURNING l.owner""",
            release=f"""
UPDATE {s}.leases SET expires_at = '-infinity'
WHERE thread_id = $1 AND epoch = $2 AND owner = $3 AND {_SYNC_OFF}""",
            # $2 owner: gives back what an interrupted acquire may have taken (its epoch is
            # unknown; the owner token is unique per acquisition).
            release_owner=f"""
UPDATE {s}.leases SET expires_at = '-infinity'
WHERE thread_id = $1 AND owner = $2 AND {_SYNC_OFF}""",
            # $4 key; the fence flag lets a lost lease fail before any decision is taken.
            read_receipt=f"""
SELECT (SELECT receipt FROM {s}.receipts WHERE thread_id = $1 AND idempotency_key = $4)
           AS receipt,
       EXISTS ({fence.replace(" FOR SHARE", "")}) AS fenced""",
            # $4 key, $5 id, $6 status, $7 updated_at, $8 receipt: a new key's ``prepared``
            # receipt in one statement. On a conflict nothing is written and the stored receipt
            # comes back (an initplan, evaluated only then; NULL if a concurrent insert is not
            # in this statement's snapshot: the caller reads it).
            prepare_receipt=f"""
WITH fence AS ({fence}),
written AS (
    INSERT INTO {s}.receipts (thread_id, idempotency_key, id, status, updated_at, receipt)
    SELECT $1, $4, $5, $6, $7, $8 FROM fence WHERE {_SYNC_ON}
    ON CONFLICT (thread_id, idempotency_key) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM fence) AS fenced, (SELECT count(*) FROM written) AS written,
       CASE WHEN NOT EXISTS (SELECT 1 FROM written) THEN
           (SELECT receipt FROM {s}.receipts WHERE thread_id = $1 AND idempotency_key = $4)
       END AS existing""",
            # $4 key, $5 id, $6 status, $7 updated_at, $8 receipt, $9 expected stored status
            # (NULL: must not exist yet) - a compare-and-set against operator resolutions.
            write_receipt=f"""
WITH fence AS ({fence}),
written AS (
    INSERT INTO {s}.receipts AS r
        (thread_id, idempotency_key, id, status, updated_at, receipt)
    SELECT $1, $4, $5, $6, $7, $8 FROM fence WHERE {_SYNC_ON}
    ON CONFLICT (thread_id, idempotency_key) DO UPDATE
        SET id = excluded.id, status = excluded.status, updated_at = excluded.updated_at,
            receipt = excluded.receipt
        WHERE r.status = $9::text
    RETURNING 1
)
SELECT (SELECT count(*) FROM fence) AS fenced, (SELECT count(*) FROM written) AS written""",
            # $4 turn, $5 new revision, $6 loaded revision, $7 fingerprint, $8 result,
            # $9 sequences, $10 events, $11 agent fingerprint, $12 pending interaction kind,
            # $13 progress items. Turn row, head CAS, outbox, the lease's release, the turn's
            # inbox request marked done and its last progress items (all only when the head
            # moved): one statement, one commit. A progress item a late writer of an earlier
            # attempt took the number of is dropped, never the commit.
            commit=f"""
WITH fence AS ({commit_fence}),
head AS (
    INSERT INTO {s}.heads AS h
        (thread_id, revision, turn_id, agent_fingerprint, pending_interaction)
    SELECT $1, $5, $4, $11, $12 FROM fence WHERE {_SYNC_ON}
    ON CONFLICT (thread_id) DO UPDATE
        SET revision = excluded.revision, turn_id = excluded.turn_id,
            agent_fingerprint = excluded.agent_fingerprint,
            pending_interaction = excluded.pending_interaction
        WHERE h.revision = $6
    RETURNING 1
), turn AS (
    INSERT INTO {s}.turns (thread_id, turn_id, revision, fingerprint, result)
    SELECT $1, $4, $5, $7, $8 FROM head
    RETURNING 1
), events AS (
    INSERT INTO {s}.outbox (thread_id, turn_id, revision, sequence, event)
    SELECT $1, $4, $5, e.sequence, e.event
    FROM head, unnest($9::int[], $10::text[]) WITH ORDINALITY AS e(sequence, event, n)
    ORDER BY e.n
    RETURNING 1
), released AS (
    UPDATE {s}.leases SET expires_at = '-infinity'
    WHERE thread_id = $1 AND epoch = $2 AND owner = $3 AND EXISTS (SELECT 1 FROM head)
    RETURNING 1
), done AS (
    UPDATE {s}.inbox SET state = 'done', finished_at = now(), claimed_by = NULL,
        claimed_until = NULL
    WHERE thread_id = $1 AND turn_id = $4 AND state <> 'done' AND EXISTS (SELECT 1 FROM head)
    RETURNING 1
), progress AS (
    INSERT INTO {s}.progress (thread_id, turn_id, seq, item, written_at)
    SELECT $1, $4, coalesce((SELECT max(g.seq) FROM {s}.progress g
                             WHERE g.thread_id = $1 AND g.turn_id = $4), 0) + i.n, i.item, now()
    FROM head, unnest($13::text[]) WITH ORDINALITY AS i(item, n)
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM fence) AS fenced,
       (SELECT count(*) FROM head) AS moved,
       (SELECT count(*) FROM turn) + (SELECT count(*) FROM events) AS written,
       (SELECT count(*) FROM released) AS released,
       (SELECT revision FROM {s}.heads WHERE thread_id = $1) AS stored_revision""",
            # Group commit: the commits of several threads in one statement, one transaction,
            # one WAL flush. Row k of $1-$9 is one commit (thread, epoch, owner, turn, new
            # revision, fingerprint, result, agent fingerprint, pending interaction kind);
            # $10/$11/$12 are the events (row k, sequence, event), $13/$14 the progress items
            # (row k, item). Each row has its own fence and head compare-and-set (the new
            # revision is always the loaded one plus one); a row whose turn is already stored
            # is left out (``exists``). The answer says per row what ``commit`` says.
            commit_group=f"""
WITH req AS (
    SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::int8[],
                         $6::text[], $7::text[], $8::text[], $9::text[]) WITH ORDINALITY
        AS r(thread_id, epoch, owner, turn_id, revision, fingerprint, result, agent,
             pending, k)
), fence AS ({group_fence}), stored AS (
    SELECT r.k FROM req r JOIN {s}.turns t ON t.thread_id = r.thread_id AND t.turn_id = r.turn_id
), head AS (
    INSERT INTO {s}.heads AS h
        (thread_id, revision, turn_id, agent_fingerprint, pending_interaction)
    SELECT r.thread_id, r.revision, r.turn_id, r.agent, r.pending FROM req r
    WHERE r.k IN (SELECT k FROM fence) AND r.k NOT IN (SELECT k FROM stored) AND {_SYNC_ON}
    ON CONFLICT (thread_id) DO UPDATE
        SET revision = excluded.revision, turn_id = excluded.turn_id,
            agent_fingerprint = excluded.agent_fingerprint,
            pending_interaction = excluded.pending_interaction
        WHERE h.revision = excluded.revision - 1
    RETURNING h.thread_id
), moved AS (
    SELECT r.* FROM req r JOIN head ON head.thread_id = r.thread_id
), turn AS (
    INSERT INTO {s}.turns (thread_id, turn_id, revision, fingerprint, result)
    SELECT thread_id, turn_id, revision, fingerprint, result FROM moved
), events AS (
    INSERT INTO {s}.outbox (thread_id, turn_id, revision, sequence, event)
    SELECT m.thread_id, m.turn_id, m.revision, e.sequence, e.event
    FROM unnest($10::int8[], $11::int[], $12::text[]) WITH ORDINALITY AS e(k, sequence, event, n)
    JOIN moved m ON m.k = e.k
    ORDER BY e.n
), released AS (
    UPDATE {s}.leases l SET expires_at = '-infinity' FROM moved m
    WHERE l.thread_id = m.thread_id AND l.epoch = m.epoch AND l.owner = m.owner
    RETURNING l.thread_id
), done AS (
    UPDATE {s}.inbox i SET state = 'done', finished_at = now(), claimed_by = NULL,
        claimed_until = NULL
    FROM moved m WHERE i.thread_id = m.thread_id AND i.turn_id = m.turn_id
        AND i.state <> 'done'
), progress AS (
    INSERT INTO {s}.progress (thread_id, turn_id, seq, item, written_at)
    SELECT m.thread_id, m.turn_id,
           coalesce((SELECT max(g.seq) FROM {s}.progress g
                     WHERE g.thread_id = m.thread_id AND g.turn_id = m.turn_id), 0)
           + row_number() OVER (PARTITION BY m.k ORDER BY i.n), i.item, now()
    FROM unnest($13::int8[], $14::text[]) WITH ORDINALITY AS i(k, item, n)
    JOIN moved m ON m.k = i.k
    ON CONFLICT DO NOTHING
)
SELECT r.k,
       r.k IN (SELECT k FROM fence) AS fenced,
       r.k IN (SELECT k FROM stored) AS already,
       r.thread_id IN (SELECT thread_id FROM head) AS moved,
       r.thread_id IN (SELECT thread_id FROM released) AS released,
       (SELECT revision FROM {s}.heads WHERE thread_id = r.thread_id) AS stored_revision
FROM req r ORDER BY r.k""",
            # $4 turn. Only after a commit was not fenced: did this very lease release itself
            # (an earlier attempt of this commit landed, its answer lost) and is the turn in?
            after_commit=f"""
SELECT EXISTS (SELECT 1 FROM {s}.leases WHERE thread_id = $1 AND epoch = $2 AND owner = $3
               AND expires_at = '-infinity') AS released_by_us,
       EXISTS (SELECT 1 FROM {s}.turns WHERE thread_id = $1 AND turn_id = $4) AS committed""",
            fencing=fencing,
        )
