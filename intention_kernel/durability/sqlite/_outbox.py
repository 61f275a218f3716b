"""The ``OutboxSource`` half of ``SQLiteDurability``: delivery state on the outbox rows.

Every method is one short ``BEGIN IMMEDIATE`` transaction (SQLite has one writer, so a claim
needs no row locks: the transaction itself keeps two relays apart). Times come from the store's
clock (the adapter's ``_now``, one machine) and are kept as integer microseconds.

``claim`` walks only undelivered rows, in position order, through the partial index
``ik_outbox_open``: delivered history (however long) costs nothing, and it stops as soon as the
batch is full. A thread is held back by its first row that is claimed, backing off or dead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ...contracts.errors import InvalidInputError
from ...contracts.events import KernelEvent, StoredEvent
from ...contracts.outbox import OutboxStats
from .._documents import decode_model

if TYPE_CHECKING:
    from ._connection import Connection

__all__ = ["SQLiteOutboxSource"]

_MAX_ERROR = 2000
_EVENT_COLUMNS = (
    "position, CAST(document AS BLOB), delivered_at, attempts, last_error, dead FROM ik_outbox"
)
_EPOCH_US = datetime(1970, 1, 1, tzinfo=UTC)


def _us(moment: datetime) -> int:
    return (moment - _EPOCH_US) // timedelta(microseconds=1)


def _check_relay_id(relay_id: str) -> None:
    if not isinstance(relay_id, str) or not relay_id or len(relay_id) > 200:
        raise InvalidInputError("relay_id must be a non-empty string of at most 200 characters")


def _check_seconds(value: float, name: str) -> None:
    if not isinstance(value, int | float) or value < 0:
        raise InvalidInputError(f"{name} must be a number of seconds >= 0")


def _positions(positions: Sequence[int]) -> list[tuple[int]]:
    return [(p,) for p in positions if isinstance(p, int) and not isinstance(p, bool)]


def _stored(row: tuple[object, ...]) -> StoredEvent:
    position, text, delivered, attempts, last_error, dead = row
    assert isinstance(position, int) and isinstance(text, bytes)
    return StoredEvent(
        event=decode_model(KernelEvent, text, what="outbox event", position=position),
        position=position,
        delivered_at=None if delivered is None else datetime.fromisoformat(str(delivered)),
        attempts=int(str(attempts)),
        last_error=None if last_error is None else str(last_error),
        dead=bool(dead),
    )


def _read(conn: sqlite3.Connection, positions: Sequence[int]) -> list[StoredEvent]:
    rows = [
        conn.execute(f"SELECT {_EVENT_COLUMNS} WHERE position = ?", (p,)).fetchone()
        for p in positions
    ]
    return [_stored(row) for row in rows if row is not None]


class SQLiteOutboxSource:
    """``OutboxSource`` over the ``ik_outbox`` table; mixed into ``SQLiteDurability``."""

    if TYPE_CHECKING:
        _db: Connection

        def _now(self) -> datetime: ...

        def _check_open(self) -> None: ...

    async def claim(self, relay_id: str, *, limit: int, lease: float) -> list[StoredEvent]:
        _check_relay_id(relay_id)
        _check_seconds(lease, "lease")
        if not isinstance(limit, int) or limit < 1:
            raise InvalidInputError("limit must be a positive integer")
        self._check_open()

        def claim(conn: sqlite3.Connection) -> list[StoredEvent]:
            now = _us(self._now())
            held_back: set[str] = set()
            chosen: list[int] = []
            rows = conn.execute(
                "SELECT position, thread_id, dead, claimed_until, next_attempt_at FROM ik_outbox"
                " WHERE delivered_at IS NULL ORDER BY position"
            )
            for position, thread_id, dead, claimed_until, next_attempt_at in rows:
                if thread_id in held_back:
                    continue
                claimed = claimed_until is not None and claimed_until > now
                waiting = next_attempt_at is not None and next_attempt_at > now
                if dead or claimed or waiting:
                    held_back.add(thread_id)
                    continue
                chosen.append(position)
                if len(chosen) >= limit:
                    break
            rows.close()
            until = now + int(lease * 1_000_000)
            conn.executemany(
                "UPDATE ik_outbox SET claimed_by = ?, claimed_until = ? WHERE position = ?",
                [(relay_id, until, p) for p in chosen],
            )
            return _read(conn, chosen)

        return await self._db.write(claim, what="outbox claim")

    async def mark_delivered(self, relay_id: str, positions: Sequence[int]) -> int:
        _check_relay_id(relay_id)
        self._check_open()

        def mark(conn: sqlite3.Connection) -> int:
            now = self._now()
            before = conn.total_changes
            conn.executemany(
                "UPDATE ik_outbox SET delivered_at = ?, delivered_us = ?, dead = 0,"
                " claimed_by = NULL, claimed_until = NULL, next_attempt_at = NULL"
                " WHERE position = ? AND delivered_at IS NULL",
                [(now.isoformat(), _us(now), p) for (p,) in _positions(positions)],
            )
            return conn.total_changes - before

        return await self._db.write(mark, what="outbox mark")

    async def record_failure(
        self,
        relay_id: str,
        position: int,
        *,
        error: str,
        retry_in: float,
        max_attempts: int,
        permanent: bool = False,
    ) -> StoredEvent | None:
        _check_relay_id(relay_id)
        _check_seconds(retry_in, "retry_in")
        self._check_open()

        def fail(conn: sqlite3.Connection) -> StoredEvent | None:
            now = _us(self._now())
            changed = conn.execute(
                "UPDATE ik_outbox SET attempts = attempts + 1, last_error = ?,"
                " claimed_by = NULL, claimed_until = NULL,"
                " dead = CASE WHEN ? OR attempts + 1 >= ? THEN 1 ELSE 0 END,"
                " next_attempt_at = CASE WHEN ? OR attempts + 1 >= ? THEN NULL ELSE ? END"
                " WHERE position = ? AND delivered_at IS NULL AND dead = 0"
                " AND claimed_by = ? AND claimed_until > ?",
                (
                    str(error)[:_MAX_ERROR],
                    bool(permanent),
                    max_attempts,
                    bool(permanent),
                    max_attempts,
                    now + int(retry_in * 1_000_000),
                    position,
                    relay_id,
                    now,
                ),
            ).rowcount
            return _read(conn, [position])[0] if changed == 1 else None

        return await self._db.write(fail, what="outbox failure")

    async def release(self, relay_id: str, positions: Sequence[int]) -> int:
        _check_relay_id(relay_id)
        self._check_open()

        def release(conn: sqlite3.Connection) -> int:
            now = _us(self._now())
            before = conn.total_changes
            conn.executemany(
                "UPDATE ik_outbox SET claimed_by = NULL, claimed_until = NULL"
                " WHERE position = ? AND delivered_at IS NULL AND dead = 0"
                " AND claimed_by = ? AND claimed_until > ?",
                [(p, relay_id, now) for (p,) in _positions(positions)],
            )
            return conn.total_changes - before

        return await self._db.write(release, what="outbox release")

    async def requeue(
        self, positions: Sequence[int] | None = None, *, thread_id: str | None = None
    ) -> int:
        self._check_open()
        reset = (
            "UPDATE ik_outbox SET dead = 0, attempts = 0, next_attempt_at = NULL,"
            " claimed_by = NULL, claimed_until = NULL WHERE dead = 1"
        )

        def requeue(conn: sqlite3.Connection) -> int:
            before = conn.total_changes
            thread_clause = "" if thread_id is None else " AND thread_id = ?"
            thread_args: tuple[str, ...] = () if thread_id is None else (thread_id,)
            if positions is None:
                conn.execute(reset + thread_clause, thread_args)
            else:
                conn.executemany(
                    reset + " AND position = ?" + thread_clause,
                    [(p, *thread_args) for (p,) in _positions(positions)],
                )
            return conn.total_changes - before

        return await self._db.write(requeue, what="outbox requeue")

    async def dead_letters(self, *, limit: int = 100) -> list[StoredEvent]:
        self._check_open()

        def read(conn: sqlite3.Connection) -> list[StoredEvent]:
            rows = conn.execute(
                f"SELECT {_EVENT_COLUMNS} WHERE dead = 1 ORDER BY position LIMIT ?", (limit,)
            ).fetchall()
            return [_stored(row) for row in rows]

        return await self._db.read(read, what="outbox dead letters")

    async def prune(self, older_than: float) -> int:
        _check_seconds(older_than, "older_than")
        self._check_open()

        def prune(conn: sqlite3.Connection) -> int:
            cutoff = _us(self._now()) - int(older_than * 1_000_000)
            return conn.execute(
                "DELETE FROM ik_outbox WHERE delivered_us IS NOT NULL AND delivered_us < ?",
                (cutoff,),
            ).rowcount

        return await self._db.write(prune, what="outbox prune")

    async def outbox_stats(self) -> OutboxStats:
        self._check_open()

        def read(conn: sqlite3.Connection) -> OutboxStats:
            now = self._now()
            conn.execute("BEGIN")  # one snapshot for every count
            try:
                pending, claimed, oldest = conn.execute(
                    "SELECT count(*), count(CASE WHEN claimed_until > ? THEN 1 END),"
                    " min(position) FROM ik_outbox WHERE delivered_at IS NULL AND dead = 0",
                    (_us(now),),
                ).fetchone()
                dead, blocked = conn.execute(
                    "SELECT count(*), count(DISTINCT thread_id) FROM ik_outbox WHERE dead = 1"
                ).fetchone()
                (delivered,) = conn.execute(
                    "SELECT count(*) FROM ik_outbox WHERE delivered_us IS NOT NULL"
                ).fetchone()
                age = None
                if oldest is not None:
                    first = _read(conn, [oldest])[0].event.occurred_at
                    age = max(0.0, (now - first).total_seconds())
            finally:
                conn.execute("COMMIT")
            return OutboxStats(pending, claimed, dead, delivered, age, blocked_threads=blocked)

        return await self._db.read(read, what="outbox stats")
