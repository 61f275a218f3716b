"""``SQLiteSchedules``: the ``ScheduleStorage`` role of the embedded store (``ik_schedules``).

Times are UTC ISO text of fixed width (``_inbox_rows.iso``), so comparing the text compares
the times. A part of a row that cannot be read back (text another writer changed) reads as
empty or long ago, for its schedule alone, and a scheduler's next registration writes it anew:
the schedule then counts its occurrences from that registration.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import Any

from ...contracts.inbox import StoredSchedule
from .._schedule_role import TimerRow
from ._connection import Connection
from ._inbox_rows import iso, read_time

__all__ = ["SQLiteSchedules"]

_COLUMNS = "schedule_id, CAST(definition AS BLOB), anchor, seen_at, last_occurrence"


_READABLE = "GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T*'"
"""A stored time as ``iso`` writes it (text another writer changed is not)."""
_LONG_AGO = datetime.min.replace(tzinfo=UTC)


def _row(found: tuple[Any, ...]) -> StoredSchedule:
    """A schedule's row; a part that cannot be read (text another writer changed) reads as
    empty or long ago, for this schedule alone: a scheduler's next registration repairs it."""
    schedule_id, definition, anchor, seen_at, last = found
    return StoredSchedule(
        str(schedule_id),
        _text(definition),
        _time(anchor) or _LONG_AGO,
        _time(seen_at) or _LONG_AGO,
        _time(last),
    )


def _time(value: Any) -> datetime | None:
    """A stored time, or ``None`` (missing, or not text as ``iso`` writes it)."""
    return read_time(value) if isinstance(value, str) else None


class SQLiteSchedules:
    """``ScheduleStorage`` over the ``ik_schedules`` table of one SQLite ``Connection``."""

    def __init__(self, db: Connection) -> None:
        self._db = db

    async def register(self, schedule_id: str, definition: str, now: datetime) -> StoredSchedule:
        at = iso(now)

        def register(conn: sqlite3.Connection) -> StoredSchedule:
            found = conn.execute(
                "INSERT INTO ik_schedules (schedule_id, definition, anchor, seen_at)"
                " VALUES (?1, ?2, ?3, ?3) ON CONFLICT (schedule_id) DO UPDATE SET seen_at = ?3,"
                f" anchor = CASE WHEN definition = ?2 AND anchor {_READABLE} AND"
                f" (last_occurrence IS NULL OR last_occurrence {_READABLE}) THEN anchor"
                " ELSE ?3 END, definition = ?2,"
                f" last_occurrence = CASE WHEN last_occurrence {_READABLE} THEN last_occurrence END"
                f" RETURNING {_COLUMNS}",
                (schedule_id, definition, at),
            ).fetchone()
            return _row(found)

        return await self._db.write(register, what="schedule register")

    async def advance(self, schedule_id: str, occurrence: datetime) -> None:
        at = iso(occurrence)

        def advance(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE ik_schedules SET last_occurrence = ?2 WHERE schedule_id = ?1"
                " AND (last_occurrence IS NULL OR last_occurrence < ?2)",
                (schedule_id, at),
            )

        await self._db.write(advance, what="schedule advance")

    async def list_schedules(self) -> list[StoredSchedule]:
        def rows(conn: sqlite3.Connection) -> list[StoredSchedule]:
            found = conn.execute(f"SELECT {_COLUMNS} FROM ik_schedules ORDER BY schedule_id")
            return [_row(row) for row in found.fetchall()]

        return await self._db.read(rows, what="schedule list")

    async def add_timer(
        self, thread_id: str, turn_id: str, due_at: datetime, text: str, payload: str
    ) -> None:
        def add(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO ik_timers (thread_id, turn_id, due_at, text, payload)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (thread_id, turn_id) DO NOTHING",
                (thread_id, turn_id, iso(due_at), text, payload),
            )

        await self._db.write(add, what="timer add")

    async def due_timers(self, now: datetime, limit: int) -> list[TimerRow]:
        def due(conn: sqlite3.Connection) -> list[TimerRow]:
            found = conn.execute(
                "SELECT thread_id, turn_id, due_at, CAST(text AS BLOB), CAST(payload AS BLOB)"
                f" FROM ik_timers WHERE due_at <= ? OR NOT due_at {_READABLE}"
                " ORDER BY due_at LIMIT ?",
                (iso(now), limit),
            ).fetchall()
            return [_timer(row) for row in found]

        return await self._db.read(due, what="timer due")

    async def next_timer(self) -> datetime | None:
        def earliest(conn: sqlite3.Connection) -> datetime | None:
            (found,) = conn.execute("SELECT min(due_at) FROM ik_timers").fetchone()
            return _time(found)

        return await self._db.read(earliest, what="timer next")

    async def drop_timer(self, thread_id: str, turn_id: str) -> None:
        def drop(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM ik_timers WHERE thread_id = ? AND turn_id = ?", (thread_id, turn_id)
            )

        await self._db.write(drop, what="timer drop")


def _timer(found: tuple[Any, ...]) -> TimerRow:
    """A stored timer; an unreadable time is due now, unreadable text or payload comes back
    empty (the turn is then submitted without them, or refused and dropped: never stuck)."""
    thread_id, turn_id, due_at, text, payload = found
    return (
        str(thread_id),
        str(turn_id),
        _time(due_at) or _LONG_AGO,
        _text(text),
        _text(payload),
    )


def _text(value: Any) -> str:
    try:
        return bytes(value).decode("utf-8")
    except (TypeError, UnicodeDecodeError):
        return ""
