"""``MemorySchedules``: the ``ScheduleStorage`` role of the test-only memory store (schedule
rows and timers)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from ...contracts.inbox import StoredSchedule
from .._schedule_role import TimerRow

__all__ = ["MemorySchedules"]


class MemorySchedules:
    """``ScheduleStorage`` over a dict of rows by schedule id."""

    def __init__(
        self, rows: dict[str, StoredSchedule], timers: dict[tuple[str, str], TimerRow]
    ) -> None:
        self.rows = rows
        self.timers = timers

    async def register(self, schedule_id: str, definition: str, now: datetime) -> StoredSchedule:
        row = self.rows.get(schedule_id)
        if row is None:
            row = StoredSchedule(schedule_id, definition, now, now, None)
        elif row.definition != definition:
            row = dataclasses.replace(row, definition=definition, anchor=now, seen_at=now)
        else:
            row = dataclasses.replace(row, seen_at=now)
        self.rows[schedule_id] = row
        return row

    async def advance(self, schedule_id: str, occurrence: datetime) -> None:
        row = self.rows.get(schedule_id)
        if row is not None and (row.last_occurrence is None or row.last_occurrence < occurrence):
            self.rows[schedule_id] = dataclasses.replace(row, last_occurrence=occurrence)

    async def list_schedules(self) -> list[StoredSchedule]:
        return [self.rows[key] for key in sorted(self.rows)]

    async def add_timer(
        self, thread_id: str, turn_id: str, due_at: datetime, text: str, payload: str
    ) -> None:
        self.timers.setdefault((thread_id, turn_id), (thread_id, turn_id, due_at, text, payload))

    async def due_timers(self, now: datetime, limit: int) -> list[TimerRow]:
        due = sorted((t for t in self.timers.values() if t[2] <= now), key=lambda t: t[2])
        return due[:limit]

    async def next_timer(self) -> datetime | None:
        return min((t[2] for t in self.timers.values()), default=None)

    async def drop_timer(self, thread_id: str, turn_id: str) -> None:
        self.timers.pop((thread_id, turn_id), None)
