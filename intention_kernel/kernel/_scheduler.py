"""``Scheduler``: submits the agent's schedules' occurrences, and due timers, to the inbox.

Why any number of schedulers may run at once with no leader: an occurrence is a submit whose
turn id is the schedule id plus the occurrence's time, idempotent on the ids, so every
scheduler that reaches an occurrence submits the same request and one turn commits. A
scheduler that dies loses nothing while another one runs; when none ran for a while, the next
one to start finds the occurrences nobody submitted in time (``Schedule.due``) and applies the
schedule's ``missed`` policy. What it has dealt with is recorded in the store
(``store.schedules.advance``), after the submits: a crash in between submits those again.

Timers (``contracts.inbox.Timer``) wait in the store beside the inbox and are submitted when
due, by whichever scheduler sees them first (idempotent too), then forgotten; a scheduler that
dies between the two submits them again.

A failed round (the store unreachable) is retried after ``RETRY`` seconds; an occurrence that
waited longer than its grace by then is missed. The loop never sleeps longer than
``MAX_SLEEP``, so a wall clock that jumps is noticed within it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from ..contracts.errors import ErrorCode, KernelError, UsageError
from ..contracts.inbox import ScheduleRows, Timer, occurrence_turn_id
from ._schedule import Schedule

__all__ = ["Scheduler", "SubmitTurn", "schedule_rows_of", "utc_now"]

log = logging.getLogger("intention_kernel.schedules")

MAX_SLEEP = 30.0
RETRY = 1.0
REGISTER_EVERY = 300.0
"""Seconds between registrations of the same schedules (operators see ``seen_at`` move)."""

TIMER_BATCH = 100
"""Timers one round submits at most (the next round takes the rest at once)."""


class SubmitTurn(Protocol):
    """``CompiledAgent.submit``: how an occurrence or a due timer becomes an inbox request."""

    async def __call__(
        self,
        *,
        thread_id: str,
        turn_id: str,
        text: str,
        selection: Mapping[str, Any] | None = None,
        host_context: Mapping[str, Any] | None = None,
    ) -> object: ...


Wanted = Callable[[Timer], Awaitable[bool]]
"""Whether a due timer's turn is still worth running (``False``: it is dropped unsubmitted)."""


async def _always(_: Timer) -> bool:
    return True


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
        submit: SubmitTurn,
        *,
        clock: Callable[[], datetime] = utc_now,
        wanted: Wanted = _always,
    ) -> None:
        self.schedules = tuple(schedules)
        self._rows = rows
        self._submit = submit
        self._clock = clock
        self._wanted = wanted
        self._since: dict[str, datetime] = {}
        self.submitted = 0
        """Occurrences this scheduler submitted (a submit another one made first included)."""
        self.fired = 0
        """Timers this scheduler submitted or found no longer wanted."""
        self._nudged = asyncio.Event()

    def nudge(self) -> None:
        """A timer was kept in this process: look at the timers now, not after the sleep."""
        self._nudged.set()

    async def register(self) -> None:
        """Record every schedule's definition; learn from when its occurrences count."""
        for schedule in self.schedules:
            row = await self._rows.register(schedule.id, schedule.definition(), self._clock())
            since = (
                row.anchor if row.last_occurrence is None else max(row.anchor, row.last_occurrence)
            )
            self._since[schedule.id] = max(since, self._since.get(schedule.id, since))

    async def tick(self) -> float:
        """One round at the clock's now: submit the due occurrences and record them, submit
        the due timers; the seconds until the next occurrence or timer (at most
        ``MAX_SLEEP``)."""
        now = self._clock()
        wait = MAX_SLEEP
        for schedule in self.schedules:
            since = self._since[schedule.id]
            due = schedule.due(since=since, now=now)
            for occurrence in due.submits:
                await self._occurrence(schedule, occurrence, occurrence == due.catch_up)
            if due.last is not None:
                await self._rows.advance(schedule.id, due.last)
                self._since[schedule.id] = since = due.last
            upcoming = schedule.next_after(max(since, now))
            wait = min(wait, (upcoming - now).total_seconds())
        while len(fired := await self._rows.due_timers(now, TIMER_BATCH)) > 0:
            for timer in fired:
                await self._timer(timer)
            if len(fired) < TIMER_BATCH:
                break
        next_timer = await self._rows.next_timer()
        if next_timer is not None:
            wait = min(wait, (next_timer - now).total_seconds())
        return max(wait, 0.0)

    async def _occurrence(self, schedule: Schedule, occurrence: datetime, catch_up: bool) -> None:
        """A submit whose turn id names the occurrence (idempotent); its host context names the
        schedule, the occurrence and whether it catches up."""
        try:
            await self._submit(
                thread_id=schedule.thread_id,
                turn_id=occurrence_turn_id(schedule.id, occurrence),
                text=schedule.text,
                host_context={
                    "schedule_id": schedule.id,
                    "occurrence": occurrence.isoformat(),
                    "catch_up": catch_up,
                },
            )
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

    async def _timer(self, timer: Timer) -> None:
        """Submit a due timer, then forget it. A store error keeps it for the next round; a
        refusal of the request itself (it can never be submitted) drops it, logged."""
        try:
            if await self._wanted(timer):
                await self._submit(
                    thread_id=timer.thread_id,
                    turn_id=timer.turn_id,
                    text=timer.text,
                    selection=timer.selection,
                    host_context=timer.host_context,
                )
        except KernelError as exc:
            if exc.retryable:
                raise
            log.warning(
                "timer %s/%s refused, dropped: [%s] %s",
                timer.thread_id,
                timer.turn_id,
                exc.code,
                exc.message,
            )
        await self._rows.drop_timer(timer.thread_id, timer.turn_id)
        self.fired += 1

    async def run(self, stopping: asyncio.Event) -> None:
        """Register, then tick until ``stopping`` is set (errors are logged and retried)."""
        loop = asyncio.get_running_loop()
        registered_at: float | None = None
        while not stopping.is_set():
            self._nudged.clear()  # before the round: a nudge during it starts the next at once
            try:
                if registered_at is None or loop.time() - registered_at >= REGISTER_EVERY:
                    await self.register()
                    registered_at = loop.time()
                wait = await self.tick()
            except KernelError as exc:
                log.warning("scheduler round failed: [%s] %s", exc.code, exc.message)
                wait = RETRY
            except Exception:  # a bug must not stop the schedules for good: logged, retried
                log.exception("scheduler round failed")
                wait = RETRY
            woken = (loop.create_task(stopping.wait()), loop.create_task(self._nudged.wait()))
            try:
                await asyncio.wait(woken, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in woken:
                    task.cancel()
