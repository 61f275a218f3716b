"""``Schedules``: the public face of a store's schedule rows (``store.schedules``).

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
from ..contracts.errors import InvalidInputError
from ..contracts.ids import validate_id
from ..contracts.inbox import StoredSchedule
from ._schedule_role import ScheduleStorage

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

    async def list(self) -> list[StoredSchedule]:
        """Every stored schedule, by id."""
        self._check_open()
        return await self.storage.list_schedules()


def _aware(value: object, field: str) -> None:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidInputError(
            f"{field} must be a timezone-aware datetime", context={"field": field}
        )
