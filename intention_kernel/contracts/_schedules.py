"""Schedules: turns the agent runs on a cron, exactly once per occurrence.

Why they need nothing new to be exactly once: each occurrence is an inbox request whose turn id
is the schedule id plus the occurrence's UTC time (``occurrence_turn_id``). Any number of
schedulers may submit it; the submit is idempotent on the ids, so two schedulers, a restart or
a clock that jumps back yield one request and one committed turn per occurrence.

What the store keeps per schedule (``ScheduleInfo``) is bookkeeping for the ``missed`` policy
and for operators: the definition last registered, from when its occurrences count (``anchor``:
its first registration, or the last change of its definition), and the latest occurrence a
scheduler has dealt with (submitted, or passed over as missed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "MissedRuns",
    "ScheduleInfo",
    "ScheduleRows",
    "StoredSchedule",
    "Timer",
    "occurrence_turn_id",
]


class MissedRuns(StrEnum):
    """What a scheduler does with occurrences nobody submitted within their grace (every
    scheduler was down, or the clock jumped forward)."""

    SKIP = "skip"
    """They do not run; the next occurrence does."""
    CATCH_UP_ONE = "catch_up_one"
    """The latest of them runs once, as soon as a scheduler is back; older ones do not."""


def occurrence_turn_id(schedule_id: str, occurrence: datetime) -> str:
    """The turn id of one occurrence: ``<schedule id>@<UTC time, to the second>``."""
    return f"{schedule_id}@{occurrence.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule as the store knows it (``store.schedules.list``), for operators.

    ``seen_at``: the last time a scheduler registered it (a schedule removed from the code is
    no longer registered, and no longer runs). ``last_occurrence``: the latest occurrence a
    scheduler submitted or passed over as missed. ``next_occurrence``: the next one after
    ``now`` by its cron (``None`` when the stored definition cannot be read)."""

    schedule_id: str
    thread_id: str
    cron: str
    timezone: str
    missed: MissedRuns
    grace_seconds: float
    text: str
    anchor: datetime
    seen_at: datetime
    last_occurrence: datetime | None
    next_occurrence: datetime | None


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """One schedule's row: ``definition`` is the JSON text its scheduler registered."""

    schedule_id: str
    definition: str
    anchor: datetime
    seen_at: datetime
    last_occurrence: datetime | None


@dataclass(frozen=True, slots=True)
class Timer:
    """A turn to submit at ``due_at`` (a durable timer: no in-process sleep a restart loses).

    Why not an inbox request with ``not_before``: a pending request holds its thread's later
    requests back until it runs, and a timer may wait for days. A timer waits beside the inbox
    and is submitted (due now) when it is due, by whichever scheduler sees it first: the
    submit is idempotent on ``(thread_id, turn_id)``, so it runs once. ``selection`` and
    ``host_context`` are the turn's, as for ``agent.submit``."""

    thread_id: str
    turn_id: str
    due_at: datetime
    text: str
    selection: Mapping[str, Any] | None = None
    host_context: Mapping[str, Any] | None = None


@runtime_checkable
class ScheduleRows(Protocol):
    """A store's schedule rows (``store.schedules``), as schedulers and operators use them."""

    async def register(
        self, schedule_id: str, definition: Mapping[str, Any], now: datetime
    ) -> StoredSchedule:
        """Record the definition a scheduler runs, at ``now`` by its clock; a changed one
        counts its occurrences from ``now`` (``anchor``)."""
        ...

    async def advance(self, schedule_id: str, occurrence: datetime) -> None:
        """Record ``occurrence`` as dealt with (it never goes back)."""
        ...

    async def list_schedules(self) -> list[StoredSchedule]:
        """Every stored schedule, by id."""
        ...

    async def add_timer(self, timer: Timer) -> None:
        """Keep ``timer`` until it is submitted (the same ids again: the first one stays)."""
        ...

    async def due_timers(self, now: datetime, limit: int = 100) -> list[Timer]:
        """Timers due at ``now``, earliest first."""
        ...

    async def next_timer(self) -> datetime | None:
        """When the earliest timer is due (``None``: no timer)."""
        ...

    async def drop_timer(self, thread_id: str, turn_id: str) -> None:
        """Forget a timer (it was submitted, or cannot be)."""
        ...
