"""The ``OutboxSource`` hooks of ``SQLiteDurability``: delivery state on the outbox rows.

Every hook is one short ``BEGIN IMMEDIATE`` transaction (SQLite has one writer, so a claim
needs no row locks: the transaction itself keeps two relays apart) applying the pure rules of
``_outbox_rules``. Times come from the store's clock (the adapter's ``_now``, one machine) and
are kept as integer microseconds.

``claim`` walks only undelivered rows, in position order, through the partial index
``ik_outbox_open``: delivered history (however long) costs nothing, and it stops as soon as the
batch is full. A thread is held back by its first row that is claimed, backing off or dead.
A chosen row that cannot be read back is dead-lettered in the same transaction (its reason in
``last_error``) and holds back its own thread only; reads list it as a placeholder.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

from ...contracts.errors import CheckpointCorruptError
from ...contracts.events import KernelEvent, StoredEvent
from ...contracts.outbox import (
    OutboxStats,
    Partition,
    PartitionLease,
    Partitions,
    served_partitions,
)
from .._documents import decode_model, unreadable, unreadable_event
from .._outbox_rules import Candidate, claimable, failed_attempt, may_hold_partition
from .._writes import utc_now
from ._connection import Connection

__all__ = ["EVENT_COLUMNS", "SQLiteOutbox", "stored_event"]

EVENT_COLUMNS = (
    "position, CAST(document AS BLOB), delivered_at, attempts, last_error, dead,"
    " thread_id, turn_id, event_id, sequence, revision FROM ik_outbox"
)
"""``SELECT`` these for ``stored_event``."""
_EPOCH_US = datetime(1970, 1, 1, tzinfo=UTC)


def _us(moment: datetime) -> int:
    return (moment - _EPOCH_US) // timedelta(microseconds=1)


def _at(us: int) -> datetime:
    return _EPOCH_US + timedelta(microseconds=us)


def _moment(us: int | None) -> datetime | None:
    return None if us is None else _at(us)


def stored_event(row: tuple[object, ...]) -> StoredEvent:
    """The row (``EVENT_COLUMNS``) as a ``StoredEvent``; an unreadable document as a
    placeholder from the row's columns, with ``corrupt`` saying why."""
    (
        position,
        text,
        delivered,
        attempts,
        last_error,
        dead,
        thread,
        turn,
        event_id,
        sequence,
        revision,
    ) = row
    assert isinstance(position, int) and isinstance(text, bytes)
    corrupt = None
    try:
        event = decode_model(KernelEvent, text, what="outbox event", position=position)
    except CheckpointCorruptError as exc:
        corrupt = unreadable(exc)
        event = unreadable_event(
            position=position,
            thread_id=str(thread),
            turn_id=str(turn),
            sequence=int(str(sequence)),
            reason=corrupt,
            event_id=str(event_id),
        )
    return StoredEvent(
        event=event,
        position=position,
        revision=int(str(revision)),
        delivered_at=None if delivered is None else datetime.fromisoformat(str(delivered)),
        attempts=int(str(attempts)),
        last_error=None if last_error is None else str(last_error),
        dead=bool(dead),
        corrupt=corrupt,
    )


def _read(conn: sqlite3.Connection, positions: Sequence[int]) -> list[StoredEvent]:
    rows = [
        conn.execute(f"SELECT {EVENT_COLUMNS} WHERE position = ?", (p,)).fetchone()
        for p in positions
    ]
    return [stored_event(row) for row in rows if row is not None]


class SQLiteOutbox:
    """``OutboxStorage`` over the ``ik_outbox`` table of one SQLite ``Connection``."""

    def __init__(self, db: Connection, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._db = db
        self._now = clock

    async def claim(
        self, relay_id: str, limit: int, lease: float, partitions: Partitions | None
    ) -> list[StoredEvent]:
        def claim(conn: sqlite3.Connection) -> list[StoredEvent]:
            now = self._now()
            rows = conn.execute(
                "SELECT position, thread_id, dead, claimed_until, next_attempt_at FROM ik_outbox"
                " WHERE delivered_at IS NULL ORDER BY position"
            )

            def candidates() -> Iterator[Candidate]:
                # Lazily: ``claimable`` stops reading rows once the batch is full.
                for position, thread_id, dead, claimed_until, next_attempt_at in rows:
                    yield Candidate(
                        position,
                        thread_id,
                        bool(dead),
                        _moment(claimed_until),
                        _moment(next_attempt_at),
                    )

            chosen = claimable(candidates(), now=now, limit=limit, partitions=partitions)
            rows.close()
            events: list[StoredEvent] = []
            broken: set[str] = set()  # threads held back by an unreadable row of this batch
            for stored in _read(conn, chosen):
                thread_id = stored.event.thread_id
                if thread_id in broken:
                    continue
                if stored.corrupt is not None:
                    conn.execute(
                        "UPDATE ik_outbox SET dead = 1, last_error = ?, next_attempt_at = NULL"
                        " WHERE position = ?",
                        (stored.corrupt, stored.position),
                    )
                    broken.add(thread_id)
                    continue
                events.append(stored)
            until = _us(now) + int(lease * 1_000_000)
            conn.executemany(
                "UPDATE ik_outbox SET claimed_by = ?, claimed_until = ? WHERE position = ?",
                [(relay_id, until, e.position) for e in events],
            )
            return events

        return await self._db.write(claim, what="outbox claim")

    async def hold_partition(self, relay_id: str, partition: Partition, lease: float) -> Partitions:
        def hold(conn: sqlite3.Connection) -> Partitions:
            now = self._now()
            key = (partition.count, partition.index)
            row = conn.execute(
                "SELECT holder, held_until FROM ik_relay_partitions"
                " WHERE partitions = ? AND partition = ?",
                key,
            ).fetchone()
            holder, until = (None, None) if row is None else (str(row[0]), _moment(row[1]))
            held = may_hold_partition(holder, until, relay_id, now)
            if held:
                conn.execute(
                    "INSERT OR REPLACE INTO ik_relay_partitions VALUES (?, ?, ?, ?)",
                    (*key, relay_id, _us(now) + int(lease * 1_000_000)),
                )
            live = conn.execute(
                "SELECT partition FROM ik_relay_partitions WHERE partitions = ? AND held_until > ?",
                (partition.count, _us(now)),
            ).fetchall()
            return served_partitions(partition, held, (i for (i,) in live))

        return await self._db.write(hold, what="relay partition lease")

    async def release_partition(self, relay_id: str, partition: Partition) -> bool:
        def release(conn: sqlite3.Connection) -> bool:
            return (
                conn.execute(
                    "DELETE FROM ik_relay_partitions"
                    " WHERE partitions = ? AND partition = ? AND holder = ?",
                    (partition.count, partition.index, relay_id),
                ).rowcount
                > 0
            )

        return await self._db.write(release, what="relay partition release")

    async def mark_delivered(self, relay_id: str, positions: list[int]) -> int:
        def mark(conn: sqlite3.Connection) -> int:
            now = self._now()
            before = conn.total_changes
            conn.executemany(
                "UPDATE ik_outbox SET delivered_at = ?, delivered_us = ?, dead = 0,"
                " claimed_by = NULL, claimed_until = NULL, next_attempt_at = NULL"
                " WHERE position = ? AND delivered_at IS NULL",
                [(now.isoformat(), _us(now), p) for p in positions],
            )
            return conn.total_changes - before

        return await self._db.write(mark, what="outbox mark")

    async def record_failure(
        self,
        relay_id: str,
        position: int,
        error: str,
        retry_in: float,
        max_attempts: int,
        permanent: bool,
    ) -> StoredEvent | None:
        def fail(conn: sqlite3.Connection) -> StoredEvent | None:
            now = self._now()
            row = conn.execute(
                "SELECT attempts FROM ik_outbox WHERE position = ? AND delivered_at IS NULL"
                " AND dead = 0 AND claimed_by = ? AND claimed_until > ?",
                (position, relay_id, _us(now)),
            ).fetchone()
            if row is None:
                return None  # not (or no longer) claimed by this relay
            after = failed_attempt(
                row[0], max_attempts=max_attempts, permanent=permanent, retry_in=retry_in, now=now
            )
            due = None if after.next_attempt_at is None else _us(after.next_attempt_at)
            conn.execute(
                "UPDATE ik_outbox SET attempts = ?, last_error = ?, dead = ?,"
                " next_attempt_at = ?, claimed_by = NULL, claimed_until = NULL"
                " WHERE position = ?",
                (after.attempts, error, int(after.dead), due, position),
            )
            return _read(conn, [position])[0]

        return await self._db.write(fail, what="outbox failure")

    async def release(self, relay_id: str, positions: list[int]) -> int:
        def release(conn: sqlite3.Connection) -> int:
            now = _us(self._now())
            before = conn.total_changes
            conn.executemany(
                "UPDATE ik_outbox SET claimed_by = NULL, claimed_until = NULL"
                " WHERE position = ? AND delivered_at IS NULL AND dead = 0"
                " AND claimed_by = ? AND claimed_until > ?",
                [(p, relay_id, now) for p in positions],
            )
            return conn.total_changes - before

        return await self._db.write(release, what="outbox release")

    async def requeue(self, positions: list[int] | None, thread_id: str | None) -> int:
        reset = (
            "UPDATE ik_outbox SET dead = 0, attempts = 0, next_attempt_at = NULL,"
            " claimed_by = NULL, claimed_until = NULL WHERE dead = 1"
        )
        thread_clause = "" if thread_id is None else " AND thread_id = ?"
        thread_args: tuple[str, ...] = () if thread_id is None else (thread_id,)

        def requeue(conn: sqlite3.Connection) -> int:
            before = conn.total_changes
            if positions is None:
                conn.execute(reset + thread_clause, thread_args)
            else:
                conn.executemany(
                    reset + " AND position = ?" + thread_clause,
                    [(p, *thread_args) for p in positions],
                )
            return conn.total_changes - before

        return await self._db.write(requeue, what="outbox requeue")

    async def dead_letters(self, limit: int) -> list[StoredEvent]:
        def read(conn: sqlite3.Connection) -> list[StoredEvent]:
            rows = conn.execute(
                f"SELECT {EVENT_COLUMNS} WHERE dead = 1 ORDER BY position LIMIT ?", (limit,)
            ).fetchall()
            return [stored_event(row) for row in rows]

        return await self._db.read(read, what="outbox dead letters")

    async def prune(self, older_than: float) -> int:
        def prune(conn: sqlite3.Connection) -> int:
            cutoff = _us(self._now()) - int(older_than * 1_000_000)
            return conn.execute(
                "DELETE FROM ik_outbox WHERE delivered_us IS NOT NULL AND delivered_us < ?",
                (cutoff,),
            ).rowcount

        return await self._db.write(prune, what="outbox prune")

    async def stats(self) -> OutboxStats:
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
                    # The oldest readable one: an unreadable row is dead-lettered by a claim.
                    open_rows = conn.execute(
                        f"SELECT {EVENT_COLUMNS} WHERE delivered_at IS NULL AND dead = 0"
                        " ORDER BY position"
                    )
                    readable = (e for e in map(stored_event, open_rows) if e.corrupt is None)
                    first = next((e.event.occurred_at for e in readable), None)
                    open_rows.close()
                    age = None if first is None else max(0.0, (now - first).total_seconds())
                leases = tuple(
                    PartitionLease(count, index, holder, _at(until), until > _us(now))
                    for count, index, holder, until in conn.execute(
                        "SELECT partitions, partition, holder, held_until"
                        " FROM ik_relay_partitions ORDER BY partitions, partition"
                    )
                )
            finally:
                conn.execute("COMMIT")
            return OutboxStats(
                pending, claimed, dead, delivered, age, blocked_threads=blocked, partitions=leases
            )

        return await self._db.read(read, what="outbox stats")
