"""``PostgresSchedules``: the ``ScheduleStorage`` role of the PostgreSQL store (migration 9).

Each member is one statement; its times are the schedulers' own. A registration and an advance are
bookkeeping: losing one to a crash makes a scheduler submit an occurrence again (an idempotent
submit: the same request) or count a changed definition from a little later.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...contracts.inbox import StoredSchedule
from .._schedule_role import TimerRow
from ._connection import PgConnection

__all__ = ["PostgresSchedules"]

_COLUMNS = "schedule_id, definition, anchor, seen_at, last_occurrence"


def _row(found: Any) -> StoredSchedule:
    return StoredSchedule(
        found["schedule_id"],
        found["definition"],
        found["anchor"],
        found["seen_at"],
        found["last_occurrence"],
    )


class PostgresSchedules:
    """``ScheduleStorage`` over the ``schedules`` table of one schema."""

    def __init__(self, db: PgConnection) -> None:
        self._db = db
        s = f'"{db.schema}"'
        self._register = (
            f"INSERT INTO {s}.schedules AS r (schedule_id, definition, anchor, seen_at)"
            " VALUES ($1, $2, $3, $3)"
            " ON CONFLICT (schedule_id) DO UPDATE SET seen_at = excluded.seen_at,"
            " anchor = CASE WHEN r.definition = excluded.definition THEN r.anchor"
            " ELSE excluded.anchor END, definition = excluded.definition"
            f" RETURNING {_COLUMNS}"
        )
        self._advance = (
            f"UPDATE {s}.schedules SET last_occurrence = $2 WHERE schedule_id = $1"
            " AND (last_occurrence IS NULL OR last_occurrence < $2)"
        )
        self._list = f"SELECT {_COLUMNS} FROM {s}.schedules ORDER BY schedule_id"
        self._add_timer = (
            f"INSERT INTO {s}.timers (thread_id, turn_id, due_at, text, payload)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (thread_id, turn_id) DO NOTHING"
        )
        self._due = (
            f"SELECT thread_id, turn_id, due_at, text, payload FROM {s}.timers"
            " WHERE due_at <= $1 ORDER BY due_at LIMIT $2"
        )
        self._next = f"SELECT min(due_at) FROM {s}.timers"
        self._drop = f"DELETE FROM {s}.timers WHERE thread_id = $1 AND turn_id = $2"

    async def register(self, schedule_id: str, definition: str, now: datetime) -> StoredSchedule:
        return _row(await self._db.fetchrow(self._register, schedule_id, definition, now))

    async def advance(self, schedule_id: str, occurrence: datetime) -> None:
        await self._db.execute(self._advance, schedule_id, occurrence)

    async def list_schedules(self) -> list[StoredSchedule]:
        return [_row(found) for found in await self._db.fetch(self._list)]

    async def add_timer(
        self, thread_id: str, turn_id: str, due_at: datetime, text: str, payload: str
    ) -> None:
        await self._db.execute(self._add_timer, thread_id, turn_id, due_at, text, payload)

    async def due_timers(self, now: datetime, limit: int) -> list[TimerRow]:
        found = await self._db.fetch(self._due, now, limit)
        return [(r["thread_id"], r["turn_id"], r["due_at"], r["text"], r["payload"]) for r in found]

    async def next_timer(self) -> datetime | None:
        row = await self._db.fetchrow(self._next)
        return None if row is None else row[0]

    async def drop_timer(self, thread_id: str, turn_id: str) -> None:
        await self._db.execute(self._drop, thread_id, turn_id)
