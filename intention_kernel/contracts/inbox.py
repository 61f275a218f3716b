"""The turn inbox: durable turn requests that workers run to their commit.

Why: a turn used to make progress only while its caller waited for it. A submitted request is a
row keyed by ``(thread_id, turn_id)``, the same identity as replay, so a submit is idempotent
and a direct ``run`` of the same id is the same turn. A request is marked ``done`` in the same
transaction as its turn's commit: "done" and "committed" never disagree.

States of a request::

    pending --claim--> running --turn commits--> done
       ^                 |  \\--retryable failure (attempts < max)--> pending (not_before later)
       |                 |  \\--non-retryable failure, too many attempts--> dead
       |                 \\--claim expired (worker died)--> claimable again (attempts counted)
       \\------------------ operator retry (dead) <------------------------------/

**Claim rule.** A worker claims the oldest request (by submission ``position``) that is due
(``not_before <= now`` for a pending one, an expired claim for a running one) and is the head of
its thread: no earlier request of the thread is ``pending`` or ``running``, and no other
request of the thread holds a live claim. Requests of one thread so run in submission order,
one at a time; a ``dead`` request no longer holds its thread back. Times come from the store's
clock.

**Schedules** (``MissedRuns``, ``ScheduleRows``): each occurrence of a schedule is a request
whose turn id names it (``occurrence_turn_id``), so it runs once however many schedulers submit
it; the store keeps per schedule what ``missed`` runs need and operators read.

**Progress** of a running turn (``ProgressEntry``) is written without waiting for durability:
it may be lost in a crash. The committed turn result is the truth.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from pydantic import JsonValue

from ._schedules import (
    MissedRuns,
    ScheduleInfo,
    ScheduleRows,
    StoredSchedule,
    Timer,
    occurrence_turn_id,
)

__all__ = [
    "InboxRequest",
    "InboxStats",
    "MissedRuns",
    "OperatorAction",
    "ProgressEntry",
    "RequestState",
    "ScheduleInfo",
    "ScheduleRows",
    "StoredSchedule",
    "Timer",
    "TurnInbox",
    "Wakeup",
    "occurrence_turn_id",
]


class RequestState(StrEnum):
    """Where a turn request is (see the module docstring)."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class OperatorAction:
    """An operator's retry or cancel of a request, kept on it as an audit record."""

    action: str
    actor: str
    note: str
    at: datetime
    previous_state: RequestState


@dataclass(frozen=True, slots=True)
class InboxRequest:
    """A submitted turn request as stored.

    ``position`` is the store-wide submission order. ``attempts`` counts claims. ``error`` and
    ``error_code`` are the safe message and stable code of the last failure (a dead request
    keeps them). ``claimed_until`` is when a running request's claim expires.
    """

    thread_id: str
    turn_id: str
    position: int
    state: RequestState
    text: str
    selection: dict[str, JsonValue] | None
    host_context: dict[str, JsonValue] | None
    fingerprint: str
    submitted_at: datetime
    not_before: datetime
    attempts: int = 0
    claimed_by: str | None = None
    claimed_until: datetime | None = None
    finished_at: datetime | None = None
    error_code: str | None = None
    error: str | None = None
    operator_log: tuple[OperatorAction, ...] = ()
    traceparent: str | None = None
    """The submitter's W3C trace context: the worker's turn continues that trace."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.thread_id, self.turn_id)


@dataclass(frozen=True, slots=True)
class ProgressEntry:
    """One recorded progress item of a turn: ``seq`` orders a turn's entries (from 1),
    ``item`` is the stream item as JSON (see ``kernel.streaming``)."""

    seq: int
    item: dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class InboxStats:
    """The inbox backlog, for monitoring, ``status`` and the OpenTelemetry gauges."""

    pending: int
    running: int
    dead: int
    oldest_pending_at: datetime | None
    """Submission time of the oldest pending request (its wait so far is ``now`` minus it)."""


class Wakeup(Protocol):
    """An in-process wake-up: ``wait(mark(), timeout)`` returns once ``fire()`` was called
    after ``mark()``, or after ``timeout`` seconds (other processes are found by polling).
    ``subscribe(callback)`` calls ``callback`` at every ``fire()`` until the returned
    function is called: for a waiter that also waits for other things (a worker)."""

    def mark(self) -> int: ...

    def fire(self) -> None: ...

    async def wait(self, mark: int, timeout: float) -> None: ...  # noqa: ASYNC109

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]: ...


@runtime_checkable
class TurnInbox(Protocol):
    """A store's turn inbox as the kernel, the HTTP service and operators use it (a
    ``DurableStore`` with the inbox role offers it as ``store.inbox``)."""

    @property
    def submitted(self) -> Wakeup:
        """Fired by submits, releases and operator changes in this process (wakes workers)."""
        ...

    @property
    def progressed(self) -> Wakeup:
        """Fired by progress appends and request changes in this process (wakes watchers)."""
        ...

    async def submit(
        self,
        thread_id: str,
        turn_id: str,
        *,
        text: str,
        fingerprint: str,
        selection: Mapping[str, Any] | None = None,
        host_context: Mapping[str, Any] | None = None,
        not_before: datetime | None = None,
        traceparent: str | None = None,
        claimer: str | None = None,
        claim_ttl: float = 30.0,
    ) -> InboxRequest: ...

    async def get(self, thread_id: str, turn_id: str) -> InboxRequest | None: ...

    async def list_requests(
        self,
        *,
        state: RequestState | str | None = None,
        thread_id: str | None = None,
        after_position: int = 0,
        limit: int = 100,
    ) -> list[InboxRequest]: ...

    async def stats(self) -> InboxStats: ...

    async def claim(self, worker_id: str, *, ttl: float) -> InboxRequest | None: ...

    async def renew(self, worker_id: str, *, ttl: float) -> list[tuple[str, str]]: ...

    async def release(
        self,
        worker_id: str,
        thread_id: str,
        turn_id: str,
        *,
        retry_in: float | None,
        error_code: str | None = None,
        error: str | None = None,
    ) -> InboxRequest | None: ...

    async def mark_done(self, thread_id: str, turn_id: str) -> bool: ...

    async def retry(
        self, thread_id: str, turn_id: str, *, actor: str, note: str
    ) -> InboxRequest: ...

    async def cancel(
        self, thread_id: str, turn_id: str, *, actor: str, note: str
    ) -> InboxRequest: ...

    async def append_progress(self, thread_id: str, turn_id: str, items: list[str]) -> int: ...

    async def read_progress(
        self, thread_id: str, turn_id: str, *, after: int = 0, limit: int = 1000
    ) -> list[ProgressEntry]: ...

    async def prune_progress(self, *, older_than: datetime) -> int: ...
