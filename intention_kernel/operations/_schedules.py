"""A store's schedules as operators read them: what runs when, and what ran last."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..contracts.durability import DurabilityStore
from ..contracts.errors import ErrorCode, KernelError, UsageError
from ..contracts.inbox import ScheduleInfo, ScheduleRows
from ..kernel import describe_schedule
from ._inbox import until

__all__ = ["schedule_json", "store_schedules"]


async def store_schedules(store: DurabilityStore, now: datetime) -> list[ScheduleInfo]:
    """Every schedule the store keeps, with its next occurrence after ``now``; a store without
    schedule rows answers ``NOT_SUPPORTED``."""
    try:
        rows = getattr(store, "schedules", None)
    except KernelError:
        rows = None
    if not isinstance(rows, ScheduleRows):
        raise UsageError(
            f"the {type(store).__name__} store keeps no schedules",
            code=ErrorCode.NOT_SUPPORTED,
            context={"role": "schedules"},
        )
    return [describe_schedule(row, now) for row in await rows.list_schedules()]


def schedule_json(info: ScheduleInfo, now: datetime) -> dict[str, Any]:
    """A schedule for operators: its definition (the turn's text included: it is the
    operator's own), last and next occurrence, and when a scheduler last registered it."""
    return {
        "schedule_id": info.schedule_id,
        "thread_id": info.thread_id,
        "cron": info.cron,
        "timezone": info.timezone,
        "missed": str(info.missed),
        "grace_seconds": info.grace_seconds,
        "text": info.text,
        "anchor": info.anchor,
        "seen_at": info.seen_at,
        "last_occurrence": info.last_occurrence,
        "next_occurrence": info.next_occurrence,
        "next_in": until(info.next_occurrence, now),
    }
