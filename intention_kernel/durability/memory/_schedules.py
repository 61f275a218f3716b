"""``MemorySchedules``: the ``ScheduleStorage`` role of the test-only memory store."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from ...contracts.inbox import StoredSchedule

__all__ = ["MemorySchedules"]


class MemorySchedules:
    """``ScheduleStorage`` over a dict of rows by schedule id."""

    def __init__(self, rows: dict[str, StoredSchedule]) -> None:
        self.rows = rows

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
