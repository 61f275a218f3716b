"""``PostgresSchedules``: the ``ScheduleStorage`` role of the PostgreSQL store (migration 9).

Each member is one statement; its times are the schedulers' own. A registration and an advance are
bookkeeping: losing one to a crash makes a scheduler submit an occurrence again (an idempotent
submit: the same request) or count a changed definition from a little later.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...contracts.inbox import StoredSchedule
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

    async def register(self, schedule_id: str, definition: str, now: datetime) -> StoredSchedule:
        return _row(await self._db.fetchrow(self._register, schedule_id, definition, now))

    async def advance(self, schedule_id: str, occurrence: datetime) -> None:
        await self._db.execute(self._advance, schedule_id, occurrence)

    async def list_schedules(self) -> list[StoredSchedule]:
        return [_row(found) for found in await self._db.fetch(self._list)]
