"""The inbox side of ``CompiledAgent``: submit a turn, run workers and schedules, watch.

Why apart from ``_runtime``: these are the entry points of turns that finish on their own
(``docs/inbox.md``, ``docs/schedules.md``); a worker runs each request through the agent's one
turn path (``_run_request``), so nothing here runs a turn itself.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import JsonValue

from ..contracts import codec
from ..contracts.checkpoint import KernelCheckpoint
from ..contracts.durability import Durability
from ..contracts.errors import ErrorCode, InvalidInputError, KernelError, UsageError
from ..contracts.ids import validate_id, validate_thread_id
from ..contracts.inbox import InboxRequest, ScheduleRows, Timer, TurnInbox
from ..contracts.turns import DurableTurnResult
from ..telemetry import Telemetry
from ._expiry import (
    EXPIRE_INTERACTION,
    EXTERNAL_KEY,
    EXTERNAL_TIMEOUT,
    MAX_EXTERNAL_KEY,
    expired,
    is_expiry,
    timers_of,
)
from ._pipeline import AgentRuntime
from ._pipeline.external import parked
from ._requests import inbox_of, request_fingerprint, submit_request
from ._scheduler import Scheduler, schedule_rows_of, utc_now
from ._watch import Watched, watch_turn
from ._worker import RunTurn, Worker, WorkerSettings

__all__ = ["AgentInbox", "has_timers"]

log = logging.getLogger("intention_kernel.inbox")


def has_timers(durability: object) -> ScheduleRows | None:
    """The store's schedule rows and timers, or ``None`` for a store without them."""
    try:
        return schedule_rows_of(durability)
    except UsageError:
        return None


class AgentInbox:
    """Submit, workers, the scheduler and watch, over what ``CompiledAgent`` sets up."""

    _runtime: AgentRuntime
    _durability: Durability
    _telemetry: Telemetry
    _inbox: TurnInbox | None
    _workers: set[Worker]
    """The agent's running workers: a submit hands its request to one with a free slot."""
    _run_request: RunTurn
    _timers: ScheduleRows | None
    """The store's schedule rows and timers, if it keeps them (``has_timers``)."""
    """How a worker runs a request: the agent's turn path with the request's ids and input."""

    async def submit(
        self,
        *,
        thread_id: str,
        turn_id: str,
        text: str,
        selection: Mapping[str, JsonValue] | None = None,
        host_context: Mapping[str, Any] | None = None,
        not_before: datetime | None = None,
    ) -> InboxRequest:
        """Record the turn in the store's inbox and return at once; a worker runs it.

        Idempotent on the ids (``TURN_ID_REUSED`` for another request); the same turn as a
        direct ``run``. ``host_context`` must be JSON (it is stored); ``not_before`` (aware)
        delays it. See ``docs/inbox.md``."""
        return await submit_request(
            self._inbox,
            self._workers,
            self._runtime.limits,
            request_fingerprint,
            thread_id=thread_id,
            turn_id=turn_id,
            text=text,
            selection=selection,
            host_context=host_context,
            not_before=not_before,
        )

    def worker(self, *, worker_id: str | None = None, **settings: Any) -> Worker:
        """A ``Worker`` running this agent's submitted turns (settings: ``WorkerSettings``);
        ``await worker.run()`` until ``worker.stop()`` drains it."""
        chosen = WorkerSettings(**settings)
        scheduled = chosen.schedules and (
            bool(self._runtime.definition.schedules) or self._timers is not None
        )
        return Worker(
            self._run_request,
            inbox_of(self._durability),
            chosen,
            metrics=self._telemetry.inbox(self._runtime.definition.id),
            worker_id=worker_id,
            local=self._workers,
            scheduler=self.scheduler() if scheduled else None,
        )

    def scheduler(self, *, clock: Callable[[], datetime] | None = None) -> Scheduler:
        """The scheduler of this agent's schedules (a worker runs one unless
        ``schedules=False``); ``await scheduler.run(stop_event)`` runs it alone."""
        return Scheduler(
            self._runtime.definition.schedules,
            schedule_rows_of(self._durability),
            self.submit,
            clock=clock or utc_now,
            wanted=self._timer_wanted,
        )

    async def complete_external(
        self,
        *,
        thread_id: str,
        key: str,
        result: JsonValue,
        token: str | None = None,
        host_context: Mapping[str, Any] | None = None,
    ) -> InboxRequest:
        """Complete the step a capability parked with ``AwaitingExternal(key, ...)``: a turn
        submitted to the inbox (``<key>@completed``) runs the capability again with
        ``context.external``. The same completion again is the same request (it replays); another
        result for a completed key is ``TURN_ID_REUSED``; an unknown key is ``EXTERNAL_UNKNOWN``
        and one past its timeout ``EXTERNAL_EXPIRED``, nothing written. ``token``: the caller's
        completion token (``context.completion_token``), checked first
        (``EXTERNAL_TOKEN_INVALID``); ``host_context`` is kept with the request (who sent it)."""
        validate_thread_id(thread_id)
        key = validate_id(key, "external key", max_length=MAX_EXTERNAL_KEY)
        if token is not None:
            signer = self._runtime.completion
            if signer is None or not signer.verify(token, thread_id, key):
                raise InvalidInputError(
                    "the completion token does not complete this key of this thread",
                    code=ErrorCode.EXTERNAL_TOKEN_INVALID,
                    context={"field": "token"},
                )
        codec.check(result, what="result")  # then the selection's own limits, as submit checks
        turn_id = f"{key}@completed"
        item = parked(await self._checkpoint(thread_id), key)
        if item is None:
            inbox = inbox_of(self._durability)
            if await inbox.get(thread_id, turn_id) is None:
                raise InvalidInputError(
                    "no step of this thread waits for this key",
                    code=ErrorCode.EXTERNAL_UNKNOWN,
                    context={"field": "key"},
                )
        elif expired(item.data, self._runtime.clock()):
            raise InvalidInputError(
                "the step stopped waiting for this key: its timeout passed",
                code=ErrorCode.EXTERNAL_EXPIRED,
                context={"field": "key"},
            )
        return await self.submit(
            thread_id=thread_id,
            turn_id=turn_id,
            text="",
            selection={EXTERNAL_KEY: key, "result": result},
            host_context=host_context,
        )

    async def _checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        load = getattr(self._durability, "load_checkpoint", None)
        if load is None:
            raise UsageError(
                "this store cannot read a thread's checkpoint", code=ErrorCode.NOT_SUPPORTED
            )
        checkpoint: KernelCheckpoint | None = await load(thread_id)
        return checkpoint

    async def _timer_wanted(self, timer: Timer) -> bool:
        """A question's timer is wanted while the question is the thread's open one; a parked
        step's while the step still waits. Other timers always are."""
        selection = timer.selection or {}
        if not (is_expiry(selection) or EXTERNAL_TIMEOUT in selection):
            return True
        try:
            checkpoint = await self._checkpoint(timer.thread_id)
        except UsageError:  # a store that cannot say: the turn itself checks
            return True
        if EXTERNAL_TIMEOUT in selection:
            return parked(checkpoint, str(selection[EXTERNAL_TIMEOUT])) is not None
        active = None if checkpoint is None else checkpoint.interaction
        return active is not None and active.id == selection[EXPIRE_INTERACTION]

    async def _keep_timers(self, thread_id: str, turn_id: str, stored: DurableTurnResult) -> None:
        """After a turn (committed now or replayed, so a crash before this is repaired by the
        turn's retry): the timers it leaves, its question's deadline and its parked steps'
        timeouts. A store without timers, or one that fails now, leaves them to the thread's
        next turn; a late accept or completion is refused either way."""
        rows = self._timers
        if rows is None:
            return
        kept = False
        for timer in timers_of(thread_id, turn_id, stored.checkpoint):
            try:
                await rows.add_timer(timer)
                kept = True
            except KernelError as exc:
                log.warning("a timer was not kept: [%s] %s", exc.code, exc.message)
        if kept:  # this process's schedulers look at it now, not after their sleep
            for worker in self._workers:
                if worker.scheduler is not None:
                    worker.scheduler.nudge()

    async def work(self, **settings: Any) -> None:
        """Run a worker in this task until it is cancelled (``worker()`` to drain instead)."""
        await self.worker(**settings).run()

    def watch(
        self, *, thread_id: str, turn_id: str, after: str | None = None, poll_interval: float = 0.25
    ) -> AsyncIterator[Watched]:
        """Follow a submitted (or committed) turn from any process: its recorded progress
        after the cursor ``after``, then the committed ``TurnCompleted`` (a dead request
        raises ``REQUEST_DEAD``). Each item carries the cursor to rejoin after it."""
        return watch_turn(
            self._durability, thread_id, turn_id, after=after, poll_interval=poll_interval
        )
