"""``ScheduleStorage``: the optional storage role of schedules (``contracts.inbox``).

Each member is one short transaction. Times are the schedulers' own (they compare them with
their clock, not the store's). Nothing here decides what runs: the
occurrences themselves are inbox submissions (idempotent on their turn ids); these rows only
keep, per schedule, the definition last registered, the moment its occurrences count from and
the latest occurrence a scheduler dealt with, for the ``missed`` policy and for operators.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from ..contracts.inbox import StoredSchedule

__all__ = ["ScheduleStorage", "StoredSchedule", "TimerRow"]

TimerRow = tuple[str, str, datetime, str, str]
"""A stored timer: ``(thread_id, turn_id, due_at, text, payload)``, ``payload`` the codec's
JSON text of ``{"selection": ..., "host_context": ...}``."""


class ScheduleStorage(Protocol):
    """The storage side of ``Schedules`` (``store.schedules``)."""

    async def register(self, schedule_id: str, definition: str, now: datetime) -> StoredSchedule:
        """Insert the schedule (``anchor`` and ``seen_at`` ``now``), or: with another definition,
        store it and move ``anchor`` to ``now``; with the same, only ``seen_at``. Returns the
        row."""
        ...

    async def advance(self, schedule_id: str, occurrence: datetime) -> None:
        """``last_occurrence`` becomes ``occurrence`` unless it is already as late (it never
        goes back); an unknown schedule is left alone."""
        ...

    async def list_schedules(self) -> list[StoredSchedule]:
        """Every stored schedule, by id."""
        ...

    async def add_timer(
        self, thread_id: str, turn_id: str, due_at: datetime, text: str, payload: str
    ) -> None:
        """Insert the timer unless one with its ids exists."""
        ...

    async def due_timers(self, now: datetime, limit: int) -> list[TimerRow]:
        """Timers due at ``now``, earliest first, at most ``limit``."""
        ...

    async def next_timer(self) -> datetime | None:
        """The earliest ``due_at``."""
        ...

    async def drop_timer(self, thread_id: str, turn_id: str) -> None:
        """Delete the timer (none: nothing)."""
        ...
