"""``Schedules``: the public face of a store's schedule rows and timers (``store.schedules``).

Each method checks its arguments, then that the store is open, then makes one call to the
store's ``ScheduleStorage`` role. The scheduler that uses it is the kernel's
(``kernel/_scheduler.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..contracts import codec
from ..contracts.codec import JsonLimits
from ..contracts.errors import InvalidInputError, KernelError
from ..contracts.ids import validate_id, validate_thread_id, validate_turn_id
from ..contracts.inbox import StoredSchedule, Timer
from . import _arguments as check
from ._inbox_rows import encode_payload
from ._schedule_role import ScheduleStorage, TimerRow

__all__ = ["MAX_DEFINITION_BYTES", "Schedules"]

MAX_DEFINITION_BYTES = 200_000


class Schedules:
    """Schedule rows of one store (see ``_schedule_role``)."""

    def __init__(
        self, storage: ScheduleStorage, *, json_limits: JsonLimits, check_open: Callable[[], None]
    ) -> None:
        self.storage = storage
        self.json_limits = json_limits
        self._check_open = check_open

    async def register(
        self, schedule_id: str, definition: Mapping[str, Any], now: datetime
    ) -> StoredSchedule:
        """Record what a scheduler runs ``schedule_id`` with, at ``now`` by its clock; a
        changed definition counts its occurrences from ``now``."""
        validate_id(schedule_id, "schedule_id")
        _aware(now, "now")
        if not isinstance(definition, Mapping):
            raise InvalidInputError("definition must be a mapping", context={"field": "definition"})
        codec.check(dict(definition), limits=self.json_limits, what="definition")
        text = codec.canonical_json(dict(definition), limits=self.json_limits)
        if len(text.encode("utf-8")) > MAX_DEFINITION_BYTES:
            raise InvalidInputError(
                "the schedule definition is too large to store", context={"field": "definition"}
            )
        self._check_open()
        return await self.storage.register(schedule_id, text, now)

    async def advance(self, schedule_id: str, occurrence: datetime) -> None:
        """Record ``occurrence`` as dealt with (submitted, or passed over as missed)."""
        validate_id(schedule_id, "schedule_id")
        _aware(occurrence, "occurrence")
        self._check_open()
        await self.storage.advance(schedule_id, occurrence)

    async def list_schedules(self) -> list[StoredSchedule]:
        """Every stored schedule, by id."""
        self._check_open()
        return await self.storage.list_schedules()

    async def add_timer(self, timer: Timer) -> None:
        """Keep ``timer`` until a scheduler submits it (the same ids again: the first stays)."""
        if not isinstance(timer, Timer):
            raise InvalidInputError("timer must be a Timer", context={"field": "timer"})
        validate_thread_id(timer.thread_id)
        validate_turn_id(timer.turn_id)
        _aware(timer.due_at, "due_at")
        if not isinstance(timer.text, str) or len(timer.text.encode("utf-8", "surrogatepass")) > (
            self.json_limits.max_bytes
        ):
            raise InvalidInputError(
                "text must be text that fits the store", context={"field": "text"}
            )
        codec.check(timer.text, limits=self.json_limits, what="text")
        payload = encode_payload(timer.selection, timer.host_context, None, self.json_limits)
        self._check_open()
        await self.storage.add_timer(
            timer.thread_id, timer.turn_id, timer.due_at, timer.text, payload
        )

    async def due_timers(self, now: datetime, limit: int = 100) -> list[Timer]:
        """Timers due at ``now``, earliest first; one whose payload cannot be read comes back
        without selection and host context (its turn then runs as its text says)."""
        _aware(now, "now")
        limit = check.check_limit(limit)
        self._check_open()
        return [_timer(row) for row in await self.storage.due_timers(now, limit)]

    async def next_timer(self) -> datetime | None:
        """When the earliest timer is due (``None``: no timer)."""
        self._check_open()
        return await self.storage.next_timer()

    async def drop_timer(self, thread_id: str, turn_id: str) -> None:
        """Forget a timer (submitted, or refused for good)."""
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        self._check_open()
        await self.storage.drop_timer(thread_id, turn_id)


def _timer(row: TimerRow) -> Timer:
    thread_id, turn_id, due_at, text, payload = row
    try:
        parts = codec.decode(payload, what="timer")
    except KernelError:
        parts = None
    if not isinstance(parts, dict):
        parts = {}
    selection, host_context = parts.get("selection"), parts.get("host_context")
    return Timer(
        thread_id,
        turn_id,
        due_at,
        text,
        selection if isinstance(selection, dict) else None,
        host_context if isinstance(host_context, dict) else None,
    )


def _aware(value: object, field: str) -> None:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidInputError(
            f"{field} must be a timezone-aware datetime", context={"field": field}
        )
