"""``Worker``: claims submitted turns from the store's inbox and runs them to their commit.

Why this is safe without workflow replay: a request is claimed for a short, renewed time; a
worker that dies stops renewing, another claims the request when the claim expires and runs the
turn again with the same turn id. The turn's commit marks the request done (one transaction),
a committed turn replays, and the effect ledger keeps every write to at most one provider call
(an interrupted write is ``uncertain`` and the turn commits "being verified" instead of
calling again). The worker's own bookkeeping (release, dead-letter) is therefore never what
keeps a promise: if it is lost, the claim expires and the request is looked at again.

Failures: a retryable error (the store busy or unreachable, the turn's deadline, a lost lease)
releases the request with bounded exponential backoff; a non-retryable one, or too many
attempts, makes it ``dead`` with its code and safe message, and the thread's later requests go
on. ``stop()`` drains: no new claims, running turns get ``grace`` seconds to finish, then are
cancelled (as a cancelled ``run`` is) and given back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import random
import uuid
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from ..contracts.errors import ConfigurationError, KernelError
from ..contracts.inbox import InboxRequest, RequestState, TurnInbox
from ._progress_log import ProgressLog
from ._response import TurnResult
from ._scheduler import Scheduler
from .streaming import Progress

__all__ = ["Worker", "WorkerSettings"]

log = logging.getLogger("intention_kernel.inbox")
_PRUNE_EVERY = 300.0
"""Seconds between a worker's prunes of old progress (the first at a random moment)."""
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How a worker claims and retries (``CompiledAgent.worker(...)`` takes these as keywords).

    ``concurrency``: turns run at once. ``claim_ttl``: seconds a claim lasts unless renewed
    (every third of it); a dead worker's request is claimed again after it. ``poll_interval``:
    how often an idle worker looks for requests submitted by other processes. ``max_attempts``:
    claims before a request is dead. ``backoff``/``max_backoff``: the first and the largest
    delay of a retry. ``turn_timeout``: each turn's deadline (``run(timeout=...)``).
    ``grace``: seconds a drain lets running turns finish. ``progress_retention``: seconds a
    turn's recorded progress is kept (workers prune older entries every few minutes).
    ``schedules``: whether the worker also runs a scheduler: the agent's schedules and the
    store's due timers (``docs/schedules.md``)."""

    concurrency: int = 4
    claim_ttl: float = 30.0
    poll_interval: float = 0.5
    max_attempts: int = 5
    backoff: float = 1.0
    max_backoff: float = 60.0
    turn_timeout: float | None = 600.0
    grace: float = 30.0
    progress_retention: float = 3600.0
    schedules: bool = True

    def __post_init__(self) -> None:
        problems = []
        if not _count(self.concurrency, 1, 10_000):
            problems.append("concurrency must be an integer from 1 to 10000")
        if not _count(self.max_attempts, 1, 1_000_000):
            problems.append("max_attempts must be an integer from 1 to 1000000")
        for name in (
            "claim_ttl",
            "poll_interval",
            "backoff",
            "max_backoff",
            "grace",
            "progress_retention",
        ):
            if not _seconds(getattr(self, name)):
                problems.append(f"{name} must be a positive number of seconds")
        if not isinstance(self.schedules, bool):
            problems.append("schedules must be True or False")
        if self.turn_timeout is not None and not _seconds(self.turn_timeout):
            problems.append("turn_timeout must be a positive number of seconds or None")
        if problems:
            raise ConfigurationError("; ".join(problems), context={"setting": "worker"})


def _count(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _seconds(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 < value <= 86_400
    )


class RunTurn(Protocol):
    """How a worker runs a request: ``CompiledAgent.run`` with the request's ids and input,
    the given deadline, and ``progress`` listening."""

    async def __call__(
        self,
        request: InboxRequest,
        timeout: float | None,  # noqa: ASYNC109 - the turn's own deadline, as run's
        progress: Progress,
    ) -> TurnResult: ...


class Worker:
    """Runs the agent's submitted turns until ``stop()`` (or the task running ``run`` is
    cancelled, which stops at once: running turns are cancelled as a cancelled ``run``)."""

    def __init__(
        self,
        run_turn: RunTurn,
        inbox: TurnInbox,
        settings: WorkerSettings,
        *,
        metrics: Any,
        worker_id: str | None = None,
        local: set[Worker] | None = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        self._run_turn = run_turn
        self.settings = settings
        self.inbox = inbox
        self.worker_id = worker_id or f"worker-{uuid.uuid4().hex[:16]}"
        self._running: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._reserved = 0  # slots held for submits that may hand this worker their request
        # Turns that committed and are only tidying up: their slot is free (the submit of a
        # caller that waited for the commit finds it so).
        self._committed: set[tuple[str, str]] = set()
        self._live = False
        self._local = local
        self._stopping = asyncio.Event()
        self._metrics = metrics  # wait, attempts, outcomes (``Telemetry.inbox``)
        self.completed = 0
        """Requests this worker finished (done, released or dead), for tests and metrics."""
        self._giving_back: set[asyncio.Task[None]] = set()
        self._waiter: asyncio.Future[None] | None = None  # the claim loop's pause
        self._submits = False  # a submit in this process since the claim loop last looked
        self._behind = False  # a claim found nothing while turns ran (their threads' next)
        self._slot_wanted = False  # the claim loop waits for a slot to claim with
        self.scheduler = scheduler
        """Submits the agent's schedules' occurrences while the worker runs (``None``: none)."""

    def stop(self) -> None:
        """Drain: claim nothing more; ``run`` returns once running turns ended (or ``grace``)."""
        self._stopping.set()
        self._wake()

    @property
    def running(self) -> int:
        return len(self._running)

    def _free(self) -> bool:
        busy = len(self._running) - len(self._committed) + self._reserved
        return busy < self.settings.concurrency

    def can_take(self) -> bool:
        """Whether ``slot`` would hold a slot now."""
        return self._live and not self._stopping.is_set() and self._free()

    @contextlib.contextmanager
    def slot(self) -> Iterator[str | None]:
        """For a submit in this process: this worker's id while a slot is held for it (the
        submit then claims the request for this worker and ``adopt`` runs it), or ``None``
        when it cannot take one now (stopped, draining, full)."""
        if not self.can_take():
            yield None
            return
        self._reserved += 1
        try:
            yield self.worker_id
        finally:
            self._reserved -= 1

    def adopt(self, request: InboxRequest) -> None:
        """Run a request a submit claimed for this worker (see ``slot``); anything else (not
        claimed by it, already running here) is left to the claim rule."""
        if (
            request.state is not RequestState.RUNNING
            or request.claimed_by != self.worker_id
            or request.key in self._running
        ):
            return
        if not self._live:  # stopped meanwhile: given back rather than left to expire
            self._spawn_give_back(request)
            return
        self._start(request)

    def _start(self, request: InboxRequest) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(request))
        self._running[request.key] = task
        task.add_done_callback(functools.partial(self._finished, request.key))

    def _spawn_give_back(self, request: InboxRequest) -> None:
        task = asyncio.get_running_loop().create_task(self._give_back(request, 0.0, None, None))
        self._giving_back.add(task)
        task.add_done_callback(self._giving_back.discard)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        heartbeat = loop.create_task(self._heartbeat())
        scheduling = None
        if self.scheduler is not None:
            scheduling = loop.create_task(self.scheduler.run(self._stopping))
        self._live = True
        if self._local is not None:
            self._local.add(self)
        unsubscribe = self.inbox.submitted.subscribe(self._submitted)
        try:
            await self._claim_loop()
            await self._drain()
        finally:
            unsubscribe()
            self._live = False
            if self._local is not None:
                self._local.discard(self)
            heartbeat.cancel()
            if scheduling is not None:
                scheduling.cancel()
            for task in self._running.values():
                task.cancel()
            if self._running:
                await asyncio.gather(*self._running.values(), return_exceptions=True)
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            if scheduling is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await scheduling

    async def _claim_loop(self) -> None:
        """Claim while a claim may find something: at start, after a submit in this process
        or a polling interval, and when a slot frees while requests may be waiting (a claim
        found none while this worker's own turns ran: later requests of their threads). A
        request handed over by a submit (``adopt``) needs no claim, and its end none either."""
        settings = self.settings
        loop = asyncio.get_running_loop()
        idle = 0.01
        poll_at = loop.time()
        hint = True
        while not self._stopping.is_set():
            self._submits = False
            if loop.time() >= poll_at:
                hint = True
            if hint and self._free():
                request = None
                try:
                    request = await self.inbox.claim(self.worker_id, ttl=settings.claim_ttl)
                except KernelError as exc:
                    log.warning("inbox claim failed: [%s] %s", exc.code, exc.message)
                if request is not None:
                    idle = 0.01
                    self._start(request)
                    continue
                hint, self._behind = False, bool(self._running)
                idle = min(idle * 2, settings.poll_interval)
                poll_at = loop.time() + idle
            # Wait for a submit in this process, a slot, a stop, or the polling interval
            # (other processes' submits), backing off a little while nothing is found.
            wait = max(poll_at - loop.time(), 0.0) if not hint else settings.poll_interval
            self._slot_wanted = hint or self._behind  # a freed slot has something to claim
            await self._pause(wait)
            if self._submits:
                hint = True
            elif self._behind and self._free():
                hint, self._behind = True, False

    async def _pause(self, seconds: float) -> None:
        """Until ``_wake`` (a submit in this process, a turn's end, ``stop``) or ``seconds``:
        one future, not a task per thing waited for (a worker waits once per turn)."""
        if self._submits or self._stopping.is_set():
            return
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = loop.call_later(seconds, self._wake)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _submitted(self) -> None:
        self._submits = True
        self._wake()

    def _finished(self, key: tuple[str, str], _: object) -> None:
        self._running.pop(key, None)
        self._committed.discard(key)
        self.completed += 1
        if self._slot_wanted:
            self._wake()

    async def _drain(self) -> None:
        if not self._running:
            return
        _, late = await asyncio.wait(self._running.values(), timeout=self.settings.grace)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)

    async def _heartbeat(self) -> None:
        """One renewal for every claim this worker holds, every third of the claim's ttl; and
        now and then, progress older than the retention window is pruned."""
        loop = asyncio.get_running_loop()
        next_prune = loop.time() + random.uniform(0, _PRUNE_EVERY)
        while True:
            await asyncio.sleep(self.settings.claim_ttl / 3)
            try:
                if self._running:
                    await self.inbox.renew(self.worker_id, ttl=self.settings.claim_ttl)
                if loop.time() >= next_prune:
                    next_prune = loop.time() + _PRUNE_EVERY
                    retention = timedelta(seconds=self.settings.progress_retention)
                    await self.inbox.prune_progress(older_than=datetime.now(UTC) - retention)
            except KernelError as exc:
                log.warning("inbox upkeep failed: [%s] %s", exc.code, exc.message)

    async def _serve(self, request: InboxRequest) -> None:
        settings = self.settings
        self._metrics.claimed(request)
        if request.attempts > settings.max_attempts:
            await self._give_back(request, None, "TOO_MANY_ATTEMPTS", "too many attempts")
            return
        progress = ProgressLog(self.inbox, request.thread_id, request.turn_id, request.attempts)
        try:
            result = await self._run_turn(
                request, settings.turn_timeout, Progress(progress.add, progress.for_commit)
            )
        except asyncio.CancelledError:
            await progress.close()
            # A drain or shutdown: given back at once (the claim would expire anyway).
            await asyncio.shield(self._give_back(request, 0.0, None, None))
            raise
        except KernelError as exc:
            await progress.close()
            retry = exc.retryable and request.attempts < settings.max_attempts
            delay = self._backoff(request.attempts) if retry else None
            await self._give_back(request, delay, str(exc.code), exc.message)
            return
        except Exception as exc:  # a bug of the host's: not worth retrying blindly
            await progress.close()
            log.exception("a submitted turn failed")
            await self._give_back(request, None, "INTERNAL", type(exc).__name__)
            return
        self._committed.add(request.key)
        await progress.close()
        if result.replayed:  # committed before (a direct run, or an attempt whose answer was lost)
            await self._guarded(self.inbox.mark_done(request.thread_id, request.turn_id))
        self._metrics.done(request)

    def _backoff(self, attempts: int) -> float:
        ceiling = min(self.settings.max_backoff, self.settings.backoff * 2 ** max(attempts - 1, 0))
        return random.uniform(ceiling / 2, ceiling)

    async def _give_back(
        self, request: InboxRequest, retry_in: float | None, code: str | None, error: str | None
    ) -> None:
        released = await self._guarded(
            self.inbox.release(
                self.worker_id,
                request.thread_id,
                request.turn_id,
                retry_in=retry_in,
                error_code=code,
                error=error,
            )
        )
        self._metrics.released(request, released, code)

    @staticmethod
    async def _guarded(write: Awaitable[_T]) -> _T | None:
        """A bookkeeping write that may fail: the claim then expires and the request is
        claimed again (and replays if its turn committed)."""
        try:
            return await write
        except KernelError as exc:
            log.warning("inbox update failed: [%s] %s", exc.code, exc.message)
            return None
