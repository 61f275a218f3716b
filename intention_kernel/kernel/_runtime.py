"""``CompiledAgent.run``: one turn inside ``durability.with_turn``.

Order: validate the request, including what the turn will record from it and its deps (typed
errors, no model call, nothing written); enter the durable boundary with a request fingerprint;
a committed turn returns at once (no model or capability call); the loaded checkpoint must be
compatible; then the pipeline runs and commits. Events reach the host's sinks only after the
turn ends, redacted. ``deps`` (any entry point) replace the kernel's for one run, never stored.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Generator, Mapping, Sequence
from typing import Any

from pydantic import JsonValue

from ..contracts.durability import Durability, TurnScope
from ..contracts.errors import TurnTimeoutError
from ..contracts.events import EventCategory, KernelEvent
from ..contracts.ids import validate_thread_id, validate_turn_id
from ..contracts.inbox import TurnInbox
from ..contracts.receipts import EffectReceipt
from ..contracts.sinks import EventSink
from ..contracts.turns import DurableTurnResult
from ..telemetry import Telemetry, db_system
from ._agent_inbox import AgentInbox, has_timers
from ._compat import Compatibility, admit_checkpoint
from ._context import TurnInfo, turn_deps
from ._events import EventRecorder, Redactor, publish
from ._pipeline import AgentRuntime, TurnState, run_pipeline
from ._pipeline.state import Meter
from ._portal import portal_of
from ._requests import has_inbox, request_fingerprint, run_request
from ._response import Response, TurnResult
from ._validation import validate_host_context, validate_selection, validate_text, validate_timeout
from ._worker import Worker
from .streaming import Progress, ProgressRecorder, StreamItem, drive

__all__ = ["CompiledAgent", "request_fingerprint"]


class CompiledAgent(AgentInbox):
    """A validated agent bound to a kernel's durability, model, ports and limits."""

    def __init__(
        self,
        runtime: AgentRuntime,
        *,
        manifest: dict[str, Any],
        compatibility: Compatibility,
        durability: Durability,
        redact: Redactor | None,
        sinks: Sequence[EventSink],
        telemetry: Telemetry | None = None,
        provider_key: Callable[[EffectReceipt], str | None] | None = None,
    ) -> None:
        self._runtime = runtime
        self._provider_key = provider_key
        # Spans and metrics (``intention_kernel.telemetry``): the global providers by default.
        self._telemetry = telemetry if telemetry is not None else Telemetry(redact=redact)
        self._store_system = db_system(durability)
        self._compat = compatibility
        self._durability = durability
        self._inbox = has_inbox(durability)  # looked up once: a protocol check is not free
        self._timers = has_timers(durability)  # every turn may leave timers (``_keep_timers``)
        self._run_request = functools.partial(run_request, self._run)
        self._workers: set[Worker] = set()
        """This agent's running workers: a submit hands its request to one with a free slot."""
        self._redact = redact
        self._sinks = tuple(sinks)
        self.manifest = manifest

    @property
    def fingerprint(self) -> str:
        return self._runtime.fingerprint

    @property
    def compatibility(self) -> Compatibility:
        """Which stored checkpoints this agent accepts (its own, declared ones, migrations)."""
        return self._compat

    @property
    def provider_key(self) -> Callable[[EffectReceipt], str | None] | None:
        """``(receipt) -> key``: what the provider received for a write (``Kernel.compile``)."""
        return self._provider_key

    @property
    def durability(self) -> Durability:
        """The store the agent's turns commit to (the HTTP service reads threads from it)."""
        return self._durability

    @property
    def inbox(self) -> TurnInbox | None:
        """The store's turn inbox, or ``None`` for a store without one."""
        return self._inbox

    def with_durability(self, durability: Durability) -> CompiledAgent:
        """The same agent (definition, model routes, ports, compatibility, sinks) committing its
        turns to ``durability``: ``intention-kernel serve`` runs a module's compiled agent on
        the store the service opened and reads."""
        return CompiledAgent(
            self._runtime,
            manifest=self.manifest,
            compatibility=self._compat,
            durability=durability,
            redact=self._redact,
            sinks=self._sinks,
            telemetry=self._telemetry,
            provider_key=self._provider_key,
        )

    @property
    def id(self) -> str:
        return self._runtime.definition.id

    async def run(
        self,
        *,
        thread_id: str,
        turn_id: str,
        text: str,
        selection: Mapping[str, JsonValue] | None = None,
        host_context: Mapping[str, Any] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - part of the public contract
        deps: object = None,
    ) -> TurnResult:
        """Run one turn and return what it committed (or replay the stored one)."""
        return await self._run(
            thread_id, turn_id, text, selection, host_context, timeout, None, deps
        )

    def stream(
        self,
        *,
        thread_id: str,
        turn_id: str,
        text: str,
        selection: Mapping[str, JsonValue] | None = None,
        host_context: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deps: object = None,
    ) -> AsyncIterator[StreamItem]:
        """``run``, yielding provisional progress and last the committed ``TurnCompleted``.

        The turn starts at the first iteration; errors (a refused request included) are raised
        by the iteration. Close it early (``contextlib.aclosing``) or cancel its consumer and
        the turn is cancelled as a cancelled ``run`` is (see ``docs/streaming.md``).
        """
        return drive(
            lambda progress: self._run(
                thread_id, turn_id, text, selection, host_context, timeout, progress, deps
            )
        )

    def run_sync(
        self,
        *,
        thread_id: str,
        turn_id: str,
        text: str,
        selection: Mapping[str, JsonValue] | None = None,
        host_context: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deps: object = None,
    ) -> TurnResult:
        """``run`` for a thread without an event loop: blocks until the turn ended.

        The turn runs on the loop the agent's store lives on (``open_durability_sync``), or on
        the shared background loop. Called from a running loop, ``UsageError``.
        """
        return portal_of(self._durability).call(
            lambda: self.run(
                thread_id=thread_id,
                turn_id=turn_id,
                text=text,
                selection=selection,
                host_context=host_context,
                timeout=timeout,
                deps=deps,
            ),
            what="run_sync",
        )

    def stream_sync(
        self,
        *,
        thread_id: str,
        turn_id: str,
        text: str,
        selection: Mapping[str, JsonValue] | None = None,
        host_context: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deps: object = None,
    ) -> Generator[StreamItem, None, None]:
        """``stream`` for a thread without an event loop, as a plain iterator.

        Closing it early (``close()``, leaving a ``with contextlib.closing(...)`` block) cancels
        the turn and waits for it, as closing ``stream`` does. From a running loop, ``UsageError``.
        """
        return portal_of(self._durability).iterate(
            lambda: self.stream(
                thread_id=thread_id,
                turn_id=turn_id,
                text=text,
                selection=selection,
                host_context=host_context,
                timeout=timeout,
                deps=deps,
            ),
            what="stream_sync",
        )

    async def _run(
        self,
        thread_id: str,
        turn_id: str,
        text: str,
        selection: Mapping[str, JsonValue] | None,
        host_context: Mapping[str, Any] | None,
        timeout: float | None,  # noqa: ASYNC109 - run's own argument
        progress: Progress | None,
        deps: object = None,
    ) -> TurnResult:
        """The one path of ``run`` and ``stream``; ``progress`` listens for a stream."""
        limits = self._runtime.limits
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        chosen = validate_selection(selection, limits)
        validate_text(text, limits, chosen is not None)
        context = validate_host_context(host_context)
        seconds = validate_timeout(timeout)
        deps = turn_deps(deps, self._runtime.deps, self._runtime.definition.deps_type)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (seconds if seconds is not None else 86_400.0)
        trace_id = self._runtime.ids("trace")
        clock = self._runtime.clock
        recorder = (
            EventRecorder(thread_id, turn_id, trace_id, self._redact, clock)
            if progress is None
            else ProgressRecorder(thread_id, turn_id, trace_id, self._redact, clock, progress)
        )
        turn = TurnInfo(thread_id, turn_id, trace_id, text, chosen)
        released: list[KernelEvent] = []
        composed: list[Response] = []
        meter = Meter()
        definition = self._runtime.definition
        traced = self._telemetry.turn(
            agent_id=definition.id,
            agent_version=definition.version,
            fingerprint=self._runtime.fingerprint,
            thread_id=thread_id,
            turn_id=turn_id,
            store=self._store_system,
        )
        called: list[float] = []  # when with_turn was called; emptied by the first attempt

        async def operation(scope: TurnScope) -> tuple[DurableTurnResult, bool]:
            if called:
                traced.acquired(called.pop())  # lease wait and checkpoint load, measured once
            prior = scope.prior_result
            if prior is not None:
                return prior, True
            checkpoint = scope.checkpoint
            if checkpoint is not None:
                checkpoint = admit_checkpoint(checkpoint, self._compat)
            state = TurnState(
                runtime=self._runtime,
                scope=scope,
                turn=turn,
                host_context=context,
                recorder=recorder,
                checkpoint=checkpoint,
                deadline=deadline,
                facts={} if checkpoint is None else {f.id: f for f in checkpoint.facts},
                meter=meter,
                progress=progress,
                deps=deps,
            )
            state.start_event = recorder.emit(
                "turn.started",
                {
                    "text": text,
                    "selection": None if chosen is None else dict(chosen),
                    "revision": 0 if checkpoint is None else checkpoint.revision,
                },
                category=EventCategory.AUDIT,
            )
            result, events = await run_pipeline(state)
            released.extend(events)
            if state.response is not None:
                composed.append(state.response)
            return result, False

        fp = request_fingerprint(text, chosen)
        limit = asyncio.timeout_at(deadline if seconds is not None else None)
        with traced:  # the ik.turn span, current while the turn runs
            recorder.traceparent = traced.traceparent  # sent on with the outbox events
            called.append(time.perf_counter())
            try:
                async with limit:
                    stored, replayed = await self._durability.with_turn(
                        thread_id, turn_id, operation, request_fingerprint=fp
                    )
            except TimeoutError:
                if not limit.expired():
                    raise  # someone else's timeout, not the turn's deadline
                raise TurnTimeoutError(
                    context={"thread_id": thread_id, "turn_id": turn_id, "timeout": seconds}
                ) from None
            traced.outcome(replayed)
            await self._keep_timers(thread_id, turn_id, stored)
            if not replayed and (inbox := self._inbox) is not None:
                inbox.progressed.fire()  # wakes this process's watchers of the turn
            if released:
                await publish(self._sinks, released)
        # A first run hands back the response it committed; a replay reads the stored one.
        result = TurnResult(
            response=composed[0] if composed else Response.model_validate(stored.response),
            checkpoint=stored.checkpoint,
            thread_id=stored.thread_id,
            turn_id=stored.turn_id,
            trace_id=stored.trace_id,
            replayed=replayed,
            usage=meter.usage(),
        )
        if progress is not None:
            progress.settle(result.response.text)  # a replay shows its stored answer at once
        return result
