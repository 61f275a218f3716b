"""``Scheduler``: submits the agent's schedules' occurrences to the inbox, from any process.

Why any number of schedulers may run at once with no leader: an occurrence is a submit whose
turn id is the schedule id plus the occurrence's time, idempotent on the ids, so every
scheduler that reaches an occurrence submits the same request and one turn commits. A
scheduler that dies loses nothing while another one runs; when none ran for a while, the next
one to start finds the occurrences nobody submitted in time (``Schedule.due``) and applies the
schedule's ``missed`` policy. What it has dealt with is recorded in the store
(``store.schedules.advance``), after the submits: a crash in between submits those again.

A failed round (the store unreachable) is retried after ``RETRY`` seconds; an occurrence that
waited longer than its grace by then is missed. The loop never sleeps longer than
``MAX_SLEEP``, so a wall clock that jumps is noticed within it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from ..contracts.errors import ErrorCode, KernelError, UsageError
from ..contracts.inbox import ScheduleRows, occurrence_turn_id
from ._schedule import Schedule

__all__ = ["Scheduler", "SubmitOccurrence", "schedule_rows_of", "utc_now"]

log = logging.getLogger("intention_kernel.schedules")

MAX_SLEEP = 30.0
RETRY = 1.0
REGISTER_EVERY = 300.0
"""Seconds between registrations of the same schedules (operators see ``seen_at`` move)."""

SubmitOccurrence = Callable[[Schedule, datetime, bool], Awaitable[object]]
"""Submits one occurrence (the flag: it is the one missed occurrence ``catch_up_one`` runs)."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def schedule_rows_of(durability: object) -> ScheduleRows:
    """The store's schedule rows, or ``NOT_SUPPORTED`` for a store without them."""
    try:
        rows = getattr(durability, "schedules", None)
    except UsageError:  # a ``DurableStore`` built without the role
        rows = None
    if not isinstance(rows, ScheduleRows):
        raise UsageError(
            "this store keeps no schedules",
            code=ErrorCode.NOT_SUPPORTED,
            context={"role": "schedules"},
        )
    return rows


class Scheduler:
    """Runs the schedules of one agent against the store's schedule ``rows``, submitting each
    occurrence with ``submit``."""

    def __init__(
        self,
        schedules: Sequence[Schedule],
        rows: ScheduleRows,
        submit: SubmitOccurrence,
        *,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.schedules = tuple(schedules)
        self._rows = rows
        self._submit = submit
        self._clock = clock
        self._since: dict[str, datetime] = {}
        self.submitted = 0
        """Occurrences this scheduler submitted (a submit another one made first included)."""

    async def register(self) -> None:
        """Record every schedule's definition; learn from when its occurrences count."""
        for schedule in self.schedules:
            row = await self._rows.register(schedule.id, schedule.definition(), self._clock())
            since = (
                row.anchor if row.last_occurrence is None else max(row.anchor, row.last_occurrence)
            )
            self._since[schedule.id] = max(since, self._since.get(schedule.id, since))

    async def tick(self) -> float:
        """One round at the clock's now: submit what is due, record it; the seconds until the
        next occurrence of any schedule (at most ``MAX_SLEEP``)."""
        now = self._clock()
        wait = MAX_SLEEP
        for schedule in self.schedules:
            since = self._since[schedule.id]
            due = schedule.due(since=since, now=now)
            for occurrence in due.submits:
                await self._submit_one(schedule, occurrence, occurrence == due.catch_up)
            if due.last is not None:
                await self._rows.advance(schedule.id, due.last)
                self._since[schedule.id] = since = due.last
            upcoming = schedule.next_after(max(since, now))
            wait = min(wait, (upcoming - now).total_seconds())
        return max(wait, 0.0)

    async def _submit_one(self, schedule: Schedule, occurrence: datetime, catch_up: bool) -> None:
        try:
            await self._submit(schedule, occurrence, catch_up)
        except KernelError as exc:
            if exc.code is not ErrorCode.TURN_ID_REUSED:
                raise
            # Another definition submitted it first (a deploy in progress): that one runs.
            log.warning(
                "schedule %s: occurrence %s was submitted with another definition",
                schedule.id,
                occurrence_turn_id(schedule.id, occurrence),
            )
        self.submitted += 1

    async def run(self, stopping: asyncio.Event) -> None:
        """Register, then tick until ``stopping`` is set (errors are logged and retried)."""
        loop = asyncio.get_running_loop()
        registered_at: float | None = None
        while not stopping.is_set():
            try:
                if registered_at is None or loop.time() - registered_at >= REGISTER_EVERY:
                    await self.register()
                    registered_at = loop.time()
                wait = await self.tick()
            except KernelError as exc:
                log.warning("scheduler round failed: [%s] %s", exc.code, exc.message)
                wait = RETRY
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await stopping.wait()
