"""``SQLiteInbox``: the ``InboxStorage`` role of the embedded store (``contracts.inbox``).

Every member is one short transaction on the worker thread; SQLite has one writer, so a
``BEGIN IMMEDIATE`` transaction keeps two claimers apart without row locks. Times come from the
store's clock (stored as ``_inbox_rows`` says). Rows are read back through ``decode_request``,
so an unreadable row fails the same way as on every store.

``claim`` walks only open rows in position order (partial index ``ik_inbox_open``) and checks
each candidate's thread through ``ik_inbox_open_by_thread``: done and dead history costs nothing.
``TurnStorage.commit`` marks the turn's request done in its own transaction
(``_inbox_rows.mark_done``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from ...contracts.errors import CheckpointCorruptError, ErrorCode
from ...contracts.inbox import (
    InboxRequest,
    InboxStats,
    OperatorAction,
    ProgressEntry,
    RequestState,
)
from .._inbox_role import NewRequest, Submitted
from .._inbox_rows import CORRUPT_REQUEST, decode_progress, decode_request, encode_log
from .._writes import utc_now
from ._connection import Connection
from ._inbox_rows import (
    ROW_COLUMNS,
    SELECT_ROWS,
    by_key,
    committed,
    decoded,
    iso,
    later,
    mark_done,
    read_row,
    read_time,
    record_progress,
    select_row,
)

__all__ = ["SQLiteInbox"]

T = TypeVar("T")

_OPEN = "state IN ('pending', 'running')"
"""Repeated in queries that filter on one open state, so they use the partial indexes."""

_CLAIMABLE = (
    # The claim rule: a due open row that is the head of its thread (no earlier open row) with
    # no live claim on any other row of the thread.
    f"SELECT r.position FROM ik_inbox AS r WHERE r.{_OPEN}"
    " AND CASE r.state WHEN 'pending' THEN r.not_before ELSE r.claimed_until END <= ?1"
    " AND NOT EXISTS (SELECT 1 FROM ik_inbox AS o"
    f"  WHERE o.thread_id = r.thread_id AND o.{_OPEN} AND o.position <> r.position"
    "   AND (o.position < r.position OR (o.state = 'running' AND o.claimed_until > ?1)))"
    " ORDER BY r.position LIMIT 1"
)

_THREAD_OPEN = f"SELECT 1 FROM ik_inbox WHERE thread_id = ?1 AND {_OPEN} LIMIT 1"

_PRUNE_PROGRESS = (  # a running turn's newest entry stays: its seq goes on (cursors hold)
    "DELETE FROM ik_progress AS g WHERE g.written_at < ?"
    " AND (EXISTS (SELECT 1 FROM ik_turns AS t WHERE t.thread_id = g.thread_id"
    "  AND t.turn_id = g.turn_id)"
    " OR g.seq < (SELECT max(n.seq) FROM ik_progress AS n WHERE n.thread_id = g.thread_id"
    "  AND n.turn_id = g.turn_id))"
)


class SQLiteInbox:
    """``InboxStorage`` over the ``ik_inbox`` and ``ik_progress`` tables of one SQLite
    ``Connection``."""

    head_check = _THREAD_OPEN
    """Whether a submit that claims must leave the request pending (its thread has an open
    request). Only a test store replaces it, to show the kill campaign catches the bug."""

    def __init__(self, db: Connection, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._db = db
        self._now = clock

    # ---------------------------------------------------------------- requests

    async def submit(self, request: NewRequest) -> Submitted:
        thread_id, turn_id = request.thread_id, request.turn_id

        def submit(conn: sqlite3.Connection) -> tuple[dict[str, Any] | None, bool, str | None]:
            row = by_key(conn, thread_id, turn_id)
            if row is not None:
                return row, False, None
            # Committed without a request? And may a claim skip the queue (nothing open)?
            committed, busy = conn.execute(
                "SELECT (SELECT fingerprint FROM ik_turns WHERE thread_id = ?1 AND turn_id = ?2),"
                f" EXISTS ({self.head_check})",
                (thread_id, turn_id),
            ).fetchone()
            if committed is not None:
                return None, True, committed
            now = self._now()
            claimer = request.claimer if request.not_before is None and not busy else None
            found = conn.execute(
                "INSERT INTO ik_inbox (thread_id, turn_id, state, text, payload, fingerprint,"
                " submitted_at, not_before, attempts, claimed_by, claimed_until)"
                f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING {ROW_COLUMNS}",
                (
                    thread_id,
                    turn_id,
                    "pending" if claimer is None else "running",
                    request.text,
                    request.payload,
                    request.fingerprint,
                    iso(now),
                    iso(request.not_before or now),
                    0 if claimer is None else 1,
                    claimer,
                    None if claimer is None else later(now, request.claim_ttl),
                ),
            ).fetchall()
            return read_row(found[0]), True, None

        row, written, fingerprint = await self._db.write(submit, what="inbox submit")
        if row is None:
            return Submitted(None, committed=True, committed_fingerprint=fingerprint)
        return Submitted(decode_request(row), inserted=written)

    async def claim(self, worker_id: str, ttl: float) -> InboxRequest | None:
        def claim(conn: sqlite3.Connection) -> InboxRequest | None:
            now = self._now()
            at = iso(now)
            while True:
                found = conn.execute(_CLAIMABLE, (at,)).fetchone()
                if found is None:
                    return None
                position = found[0]
                conn.execute(
                    "UPDATE ik_inbox SET state = 'running', claimed_by = ?, claimed_until = ?,"
                    " attempts = attempts + 1 WHERE position = ?",
                    (worker_id, later(now, ttl), position),
                )
                row = select_row(conn, "position = ?", (position,))
                try:
                    return decoded(row)
                except CheckpointCorruptError:
                    # Dead-lettered in this transaction; the claim goes on with the next row.
                    conn.execute(
                        "UPDATE ik_inbox SET state = 'dead', claimed_by = NULL,"
                        " claimed_until = NULL, finished_at = ?, error_code = ?, error = ?"
                        " WHERE position = ?",
                        (at, str(ErrorCode.CHECKPOINT_CORRUPT), CORRUPT_REQUEST, position),
                    )

        return await self._db.read(lambda conn: _unsynced_write(conn, claim), what="inbox claim")

    async def renew(self, worker_id: str, ttl: float) -> list[tuple[str, str]]:
        def renew(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            now = self._now()
            held = conn.execute(
                f"UPDATE ik_inbox SET claimed_until = ? WHERE {_OPEN} AND state = 'running'"
                " AND claimed_by = ? AND claimed_until > ? RETURNING position, thread_id, turn_id",
                (later(now, ttl), worker_id, iso(now)),
            ).fetchall()
            return [(thread_id, turn_id) for _, thread_id, turn_id in sorted(held)]

        return await self._db.write(renew, what="inbox renew")

    async def release(
        self,
        worker_id: str,
        thread_id: str,
        turn_id: str,
        *,
        retry_in: float | None,
        error_code: str | None,
        error: str | None,
    ) -> InboxRequest | None:
        def release(conn: sqlite3.Connection) -> dict[str, Any] | None:
            now = self._now()
            at = iso(now)
            held = conn.execute(
                "SELECT position FROM ik_inbox WHERE thread_id = ? AND turn_id = ?"
                " AND state = 'running' AND claimed_by = ? AND claimed_until > ?",
                (thread_id, turn_id, worker_id, at),
            ).fetchone()
            if held is None:
                return None
            args: tuple[Any, ...]
            if committed(conn, thread_id, turn_id):
                change, args = "state = 'done', finished_at = ?", (at,)
            elif retry_in is None:
                change, args = "state = 'dead', finished_at = ?", (at,)
            else:
                change, args = "state = 'pending', not_before = ?", (later(now, retry_in),)
            conn.execute(
                f"UPDATE ik_inbox SET {change}, claimed_by = NULL, claimed_until = NULL,"
                " error_code = ?, error = ? WHERE position = ?",
                (*args, error_code, error, held[0]),
            )
            return select_row(conn, "position = ?", (held[0],))

        # Read back after the transaction: a row that cannot be read keeps the change.
        return decoded(await self._db.write(release, what="inbox release"))

    async def mark_done(self, thread_id: str, turn_id: str) -> bool:
        def done(conn: sqlite3.Connection) -> bool:
            if not committed(conn, thread_id, turn_id):
                return False
            mark_done(conn, thread_id, turn_id, self._now())
            return True

        return await self._db.write(done, what="inbox mark done")

    async def get(self, thread_id: str, turn_id: str) -> InboxRequest | None:
        row = await self._db.read(lambda conn: by_key(conn, thread_id, turn_id), what="inbox get")
        return decoded(row)

    async def list_requests(
        self,
        state: RequestState | None,
        thread_id: str | None,
        after_position: int,
        limit: int,
    ) -> list[InboxRequest]:
        clauses: list[str] = ["position > ?"]
        args: list[Any] = [after_position]
        if state is not None:
            # Repeating the open states lets SQLite use a partial index (``ik_inbox_dead`` too).
            opened = state in (RequestState.PENDING, RequestState.RUNNING)
            clauses += [_OPEN, "state = ?"] if opened else ["state = ?"]
            args.append(str(state))
        if thread_id is not None:
            clauses.append("thread_id = ?")
            args.append(thread_id)
        sql = f"{SELECT_ROWS} WHERE {' AND '.join(clauses)} ORDER BY position"

        def read(conn: sqlite3.Connection) -> list[InboxRequest]:
            found: list[InboxRequest] = []
            rows = conn.execute(sql, args)
            try:
                for values in rows:  # lazily: unreadable rows are skipped, not counted
                    try:
                        found.append(decode_request(read_row(values)))
                    except CheckpointCorruptError:
                        continue
                    if len(found) >= limit:
                        break
            finally:
                rows.close()
            return found

        return await self._db.read(read, what="inbox list")

    async def operate(
        self,
        thread_id: str,
        turn_id: str,
        expected: frozenset[RequestState],
        new_state: RequestState,
        record: OperatorAction,
    ) -> InboxRequest | None:
        def operate(conn: sqlite3.Connection) -> dict[str, Any] | None:
            row = by_key(conn, thread_id, turn_id)
            if row is None or row["state"] not in expected:
                return None
            at = iso(self._now())
            log = encode_log((*decode_request(row).operator_log, record))
            args: tuple[Any, ...]
            if committed(conn, thread_id, turn_id):
                change, args = "state = 'done', finished_at = ?", (at,)
            elif new_state == RequestState.PENDING:
                change = "state = 'pending', not_before = ?, finished_at = NULL, attempts = 0"
                args = (at,)
            else:
                change, args = "state = ?, finished_at = ?", (str(new_state), at)
            conn.execute(
                f"UPDATE ik_inbox SET {change}, claimed_by = NULL, claimed_until = NULL,"
                " operator_log = ? WHERE position = ?",
                (*args, log, row["position"]),
            )
            return select_row(conn, "position = ?", (row["position"],))

        return decoded(await self._db.write(operate, what="inbox operate"))

    async def stats(self) -> InboxStats:
        def read(conn: sqlite3.Connection) -> InboxStats:
            # One statement, so one snapshot; only open and dead rows are visited.
            pending, running, oldest, dead = conn.execute(
                "SELECT count(CASE WHEN state = 'pending' THEN 1 END),"
                " count(CASE WHEN state = 'running' THEN 1 END),"
                " min(CASE WHEN state = 'pending' THEN submitted_at END),"
                " (SELECT count(*) FROM ik_inbox WHERE state = 'dead')"
                f" FROM ik_inbox WHERE {_OPEN}"
            ).fetchone()
            return InboxStats(pending, running, dead, read_time(oldest))

        return await self._db.read(read, what="inbox stats")

    # ---------------------------------------------------------------- progress

    async def append_progress(self, thread_id: str, turn_id: str, items: list[str]) -> int:
        def append(conn: sqlite3.Connection) -> int:
            return record_progress(conn, thread_id, turn_id, items, self._now())

        return await self._db.read(lambda conn: _unsynced_write(conn, append), what="progress")

    async def read_progress(
        self, thread_id: str, turn_id: str, after: int, limit: int
    ) -> list[ProgressEntry]:
        def read(conn: sqlite3.Connection) -> list[ProgressEntry]:
            rows = conn.execute(
                "SELECT seq, CAST(item AS BLOB) FROM ik_progress"
                " WHERE thread_id = ? AND turn_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (thread_id, turn_id, after, limit),
            ).fetchall()
            return [decode_progress(seq, text) for seq, text in rows]

        return await self._db.read(read, what="progress read")

    async def prune_progress(self, older_than: datetime) -> int:
        cutoff = iso(older_than)
        return await self._db.write(
            lambda conn: conn.execute(_PRUNE_PROGRESS, (cutoff,)).rowcount,
            what="progress prune",
        )


def _unsynced_write(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn`` in its own ``BEGIN IMMEDIATE`` transaction that does not wait for the disk:
    progress and claims may be lost in a crash (a lost claim is claimed again). ``NORMAL``, not
    ``OFF``: in WAL mode it skips only the commit's own fsync and still syncs checkpoints, so
    committed turns stay as durable. The store's setting is put back afterwards."""
    (setting,) = conn.execute("PRAGMA synchronous").fetchone()
    conn.execute("PRAGMA synchronous = NORMAL")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # the original error matters
                    conn.execute("ROLLBACK")
            raise
        return result
    finally:
        conn.execute(f"PRAGMA synchronous = {int(setting)}")
