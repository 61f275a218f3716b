"""The turn inbox's metrics: the backlog as the store reports it (``InboxBacklog``:
``ik.inbox.requests``, ``ik.inbox.oldest_pending.age``) and what a worker records for the
requests it runs (``WorkerMetrics``, from ``Telemetry.inbox``: ``ik.inbox.wait``,
``ik.inbox.attempts``, ``ik.inbox.outcomes``).

Why the backlog is read from the store and not counted by the workers: a request is submitted
in one process, claimed in another and retried or cancelled by an operator in a third, so only
the store knows how many wait (as for ``ik.receipts.uncertain``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

from ..contracts.inbox import InboxRequest, InboxStats, RequestState
from . import _otel
from ._common import Attributes

_WAIT_BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
"""``ik.inbox.wait`` buckets (s): an idle worker claims in milliseconds; a backlog makes
requests wait minutes or more."""
_ATTEMPT_BOUNDS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 50, 100)
"""``ik.inbox.attempts`` buckets: one per attempt up to the default ``max_attempts`` (5)."""

_OUTCOMES = ("ik.agent.id", "ik.request.outcome", "error.type")
_ATTEMPTS = ("ik.agent.id", "ik.request.outcome")
_WAIT = ("ik.agent.id",)
_BACKLOG_STATES = (RequestState.PENDING, RequestState.RUNNING, RequestState.DEAD)


class _Meters(Protocol):
    """What the worker's metrics need of the kernel's ``Telemetry``."""

    def metered(self) -> bool: ...

    def point(self, key: tuple[str | None, ...], names: tuple[str, ...]) -> Attributes: ...


class InboxInstruments:
    """The worker's instruments, made once per ``Telemetry`` (every worker of its kernel
    shares them)."""

    __slots__ = ("attempts", "outcomes", "wait")

    def __init__(self, meter: Any) -> None:
        self.wait = meter.create_histogram(
            "ik.inbox.wait",
            unit="s",
            description="From a request's submission (or its not_before) to its first claim.",
            explicit_bucket_boundaries_advisory=_WAIT_BOUNDS,
        )
        self.attempts = meter.create_histogram(
            "ik.inbox.attempts",
            unit="{attempt}",
            description="Claims a request took, when it ended done or dead.",
            explicit_bucket_boundaries_advisory=_ATTEMPT_BOUNDS,
        )
        self.outcomes = meter.create_counter(
            "ik.inbox.outcomes",
            unit="{request}",
            description="Requests a worker ran, by outcome: done, retried, dead, released.",
        )


class WorkerMetrics:
    """What one worker records for the requests it claims. Each call checks that metrics go
    somewhere (an SDK configured after the worker started is picked up)."""

    __slots__ = ("_agent_id", "_instruments", "_telemetry")

    def __init__(self, telemetry: _Meters, instruments: InboxInstruments, agent_id: str) -> None:
        self._telemetry = telemetry
        self._instruments = instruments
        self._agent_id = agent_id

    def claimed(self, request: InboxRequest) -> None:
        """A request was claimed: its first claim records how long it waited for a worker,
        from its submission, or from its ``not_before`` when that is later."""
        if request.attempts != 1 or not self._telemetry.metered():
            return
        due = max(request.submitted_at, request.not_before)
        waited = max(0.0, (datetime.now(UTC) - due).total_seconds())
        point = self._telemetry.point(("inbox.wait", self._agent_id), _WAIT)
        self._instruments.wait.record(waited, point)

    def done(self, request: InboxRequest) -> None:
        """The request's turn committed (or replayed): the request is done."""
        self._ended(request, "done", None)

    def released(
        self, request: InboxRequest, released: InboxRequest | None, error_code: str | None
    ) -> None:
        """The worker gave the claim back and the store answered ``released`` (``None``: the
        claim was no longer this worker's, or the write failed: nothing is recorded)."""
        if released is None:
            return
        if released.state is RequestState.DONE:
            outcome = "done"  # the turn had committed after all
        elif released.state is RequestState.DEAD:
            outcome = "dead"
        else:
            outcome = "released" if error_code is None else "retried"
        self._ended(request, outcome, error_code if outcome in ("retried", "dead") else None)

    def _ended(self, request: InboxRequest, outcome: str, error_code: str | None) -> None:
        telemetry = self._telemetry
        if not telemetry.metered():
            return
        instruments = self._instruments
        counted = telemetry.point(
            ("inbox.outcomes", self._agent_id, outcome, error_code), _OUTCOMES
        )
        instruments.outcomes.add(1, counted)
        if outcome in ("done", "dead"):
            point = telemetry.point(("inbox.attempts", self._agent_id, outcome), _ATTEMPTS)
            instruments.attempts.record(request.attempts, point)


class InboxStatsReader(Protocol):
    """What the backlog gauges read: a store's inbox (``store.inbox``)."""

    async def stats(self) -> InboxStats: ...


class InboxBacklog:
    """The inbox backlog gauges, as the store says (``inbox.stats()``), so every process that
    runs it reports the same numbers:

    * ``ik.inbox.requests``: requests by ``ik.request.state`` (``pending``, ``running``,
      ``dead``);
    * ``ik.inbox.oldest_pending.age``: seconds since the oldest pending request was submitted
      (0 when none is pending), computed when the gauge is read.

    The gauges report what the last ``refresh()`` read (nothing before the first one): call it
    on a schedule, or run ``watch(interval)`` as a task.
    """

    def __init__(self, inbox: InboxStatsReader, *, meter_provider: object | None = None) -> None:
        self.inbox = inbox
        self.stats: InboxStats | None = None
        if _otel.AVAILABLE:
            meter = _otel.library_meter(meter_provider)
            meter.create_observable_gauge(
                "ik.inbox.requests",
                callbacks=[self._observe_requests],
                unit="{request}",
                description="Turn requests in the inbox by state (pending, running, dead).",
            )
            meter.create_observable_gauge(
                "ik.inbox.oldest_pending.age",
                callbacks=[self._observe_age],
                unit="s",
                description="Seconds since the oldest pending turn request was submitted.",
            )

    async def refresh(self) -> InboxStats:
        """Read the store now; returns what the gauges report from now on."""
        self.stats = await self.inbox.stats()
        return self.stats

    async def watch(self, interval: float = 30.0) -> None:
        """Refresh every ``interval`` seconds until cancelled; a failed read keeps the last
        numbers (a store outage must not stop the gauges)."""
        while True:
            with contextlib.suppress(Exception):
                await self.refresh()
            await asyncio.sleep(interval)

    def _observe_requests(self, options: _otel.CallbackOptions) -> Iterable[_otel.Observation]:
        stats = self.stats
        if stats is None:
            return []
        counts = {
            RequestState.PENDING: stats.pending,
            RequestState.RUNNING: stats.running,
            RequestState.DEAD: stats.dead,
        }
        return [
            _otel.Observation(counts[state], {"ik.request.state": str(state)})
            for state in _BACKLOG_STATES
        ]

    def _observe_age(self, options: _otel.CallbackOptions) -> Iterable[_otel.Observation]:
        stats = self.stats
        if stats is None:
            return []
        oldest = stats.oldest_pending_at
        if oldest is None:
            return [_otel.Observation(0.0)]
        return [_otel.Observation(max(0.0, (datetime.now(UTC) - oldest).total_seconds()))]
