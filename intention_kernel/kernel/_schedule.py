"""``define_schedule``: a turn the agent runs on a cron, and which occurrences are due.

Cron expressions and time zones come from maintained code: ``cronsim`` (5 fields, or 6 with
seconds last) and the system's ``zoneinfo`` database. Occurrences are computed in the
schedule's zone, so "08:00 every day" stays 08:00 across daylight saving time; ``cronsim``
resolves the two DST cases as cron does: a time that does not exist that day (spring forward)
runs once at the first minute after the gap, a time that exists twice (fall back) runs once,
at its first instance, while expressions that fire every hour or more often fire in both.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..contracts import codec
from ..contracts.errors import ErrorCode, InvalidInputError, KernelError
from ..contracts.ids import MAX_ID_LENGTH, validate_id, validate_thread_id
from ..contracts.inbox import MissedRuns, ScheduleInfo, StoredSchedule
from ._limits import KernelLimits
from ._validation import validate_text

__all__ = ["DEFAULT_GRACE", "Due", "Schedule", "define_schedule", "describe_schedule"]

DEFAULT_GRACE = 60.0
"""Seconds after its time within which an occurrence still counts as on time."""
_MAX_SCHEDULE_ID = MAX_ID_LENGTH - len("@2026-01-01T00:00:00Z")
_MAX_DUE = 1000
"""Occurrences one scheduler round submits at most for a schedule (a bound, not a policy:
only those within the grace are submitted, so only a grace this long could reach it)."""


def _invalid(message: str, field: str) -> InvalidInputError:
    return InvalidInputError(message, code=ErrorCode.INVALID_SCHEDULE, context={"field": field})


@dataclass(frozen=True, slots=True)
class Due:
    """What one scheduler round does for a schedule: submit ``on_time`` (and ``catch_up``,
    the one missed occurrence ``catch_up_one`` runs), then record ``last`` as dealt with."""

    on_time: tuple[datetime, ...]
    catch_up: datetime | None
    last: datetime | None

    @property
    def submits(self) -> tuple[datetime, ...]:
        return self.on_time if self.catch_up is None else (self.catch_up, *self.on_time)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A turn run with ``text`` on ``thread_id`` at every occurrence of ``cron`` in
    ``timezone`` (see ``define_schedule``)."""

    id: str
    cron: str
    thread_id: str
    text: str
    timezone: str = "UTC"
    missed: MissedRuns = MissedRuns.SKIP
    grace: float = DEFAULT_GRACE

    def definition(self) -> dict[str, Any]:
        """What the store keeps of it (a change of any part re-anchors its occurrences)."""
        return {
            "cron": self.cron,
            "thread_id": self.thread_id,
            "text": self.text,
            "timezone": self.timezone,
            "missed": str(self.missed),
            "grace": self.grace,
        }

    def _walk(self, start: datetime, *, reverse: bool = False) -> Iterator[datetime]:
        """Occurrences strictly after ``start`` (before it, ``reverse``), in UTC. ``cronsim``
        counts in wall time: from inside a repeated hour it can name the first instance of a
        wall time, already past; those are passed over."""
        for found in CronSim(self.cron, start.astimezone(ZoneInfo(self.timezone)), reverse=reverse):
            moment = _as_utc(found)
            if (moment < start) if reverse else (moment > start):
                yield moment

    def _latest(self, since: datetime, bound: datetime) -> datetime | None:
        """The latest occurrence in ``(since, bound]``. Walking back goes by wall time, which
        passes over a repeated hour's first instances (later on the wall, earlier in fact), so
        the last ``_FOLD`` before ``bound`` is walked forward as well."""
        back = next(self._walk(bound + _TICK, reverse=True), None)
        latest = back if back is not None and back > since else None
        for moment in self._walk(max(since, bound - _FOLD)):
            if moment > bound:
                break
            if latest is None or moment > latest:
                latest = moment
        return latest

    def next_after(self, moment: datetime) -> datetime:
        """The first occurrence strictly after ``moment``."""
        return next(self._walk(moment))

    def due(self, *, since: datetime, now: datetime) -> Due:
        """The occurrences in ``(since, now]``: those less than ``grace`` seconds late are on
        time; of the older ones (missed), ``catch_up_one`` runs the latest."""
        grace = timedelta(seconds=self.grace)
        on_time: list[datetime] = []
        for moment in self._walk(max(since, now - grace)):
            if moment > now or len(on_time) == _MAX_DUE:
                break
            on_time.append(moment)
        missed = None
        bound = now - grace
        if since < bound:  # the latest occurrence in (since, now - grace]
            missed = self._latest(since, bound)
        last = on_time[-1] if on_time else missed
        catch_up = missed if self.missed is MissedRuns.CATCH_UP_ONE else None
        return Due(tuple(on_time), catch_up, last)


_TICK = timedelta(microseconds=1)
_FOLD = timedelta(hours=3)
"""More than any zone's daylight saving shift: how far back a repeated hour can reach."""


def _as_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


def define_schedule(
    id: str,
    *,
    cron: str,
    thread_id: str,
    text: str,
    timezone: str = "UTC",
    missed: MissedRuns | str = MissedRuns.SKIP,
    grace: float = DEFAULT_GRACE,
) -> Schedule:
    """A turn the agent runs at every occurrence of ``cron`` (``define_agent(schedules=...)``).

    ``cron``: five fields, or six with seconds last (``"*/10 * * * * *"``: every ten seconds).
    ``timezone``: an IANA zone the occurrences are computed in. ``missed``: what a scheduler
    that finds occurrences nobody submitted within ``grace`` seconds does with them
    (``MissedRuns``). Each occurrence is a turn with the id ``<id>@<UTC time>``. Invalid parts
    raise ``InvalidInputError`` (code ``INVALID_SCHEDULE``, or the id's own code).
    """
    validate_id(id, "schedule_id", max_length=_MAX_SCHEDULE_ID)
    if "@" in id:
        raise _invalid("a schedule id cannot contain '@' (it separates the occurrence)", "id")
    validate_thread_id(thread_id)
    validate_text(text, KernelLimits(), has_selection=False)
    if not isinstance(timezone, str) or not timezone:
        raise _invalid("timezone must be an IANA time zone name", "timezone")
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise _invalid(f"unknown time zone {timezone!r}", "timezone") from exc
    if not isinstance(cron, str) or len(cron) > 200:
        raise _invalid("cron must be a cron expression", "cron")
    try:
        next(CronSim(cron, datetime.now(zone)))
    except (CronSimError, StopIteration) as exc:
        raise _invalid(f"invalid cron expression: {exc}", "cron") from exc
    try:
        chosen = MissedRuns(missed)
    except ValueError as exc:
        raise _invalid("missed must be 'skip' or 'catch_up_one'", "missed") from exc
    if (
        isinstance(grace, bool)
        or not isinstance(grace, int | float)
        or not math.isfinite(grace)
        or not 0 < grace <= 86_400
    ):
        raise _invalid("grace must be a number of seconds in (0, 86400]", "grace")
    return Schedule(id, cron, thread_id, text, timezone, chosen, float(grace))


def describe_schedule(stored: StoredSchedule, now: datetime) -> ScheduleInfo:
    """A stored schedule for operators, with its next occurrence after ``now`` (``None``, and
    empty parts, when its stored definition cannot be read)."""
    parts: dict[str, Any] = {}
    with contextlib.suppress(KernelError):
        decoded = codec.decode(stored.definition, what="schedule")
        if isinstance(decoded, dict):
            parts = decoded
    upcoming = None
    with contextlib.suppress(KernelError, TypeError, ValueError, KeyError):
        schedule = define_schedule(
            stored.schedule_id,
            cron=parts["cron"],
            thread_id=parts["thread_id"],
            text=parts["text"],
            timezone=parts["timezone"],
            missed=parts["missed"],
            grace=parts["grace"],
        )
        upcoming = schedule.next_after(now)
    missed = parts.get("missed")
    return ScheduleInfo(
        schedule_id=stored.schedule_id,
        thread_id=str(parts.get("thread_id", "")),
        cron=str(parts.get("cron", "")),
        timezone=str(parts.get("timezone", "")),
        missed=MissedRuns(missed) if missed in tuple(MissedRuns) else MissedRuns.SKIP,
        grace_seconds=float(parts.get("grace", DEFAULT_GRACE)),
        text=str(parts.get("text", "")),
        anchor=stored.anchor,
        seen_at=stored.seen_at,
        last_occurrence=stored.last_occurrence,
        next_occurrence=upcoming,
    )
