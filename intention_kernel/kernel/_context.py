"""``CapabilityContext``: everything one step may use, and nothing else.

Why a narrow context: a capability reaches the outside world only through the host's ports and,
for writes, through ``run_effect`` (the durable effect ledger). It sees the facts visible at
step start, the turn identity, its own execution ids and its deadline, and may emit events on
its own causal branch.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic

from pydantic import JsonValue
from typing_extensions import TypeVar

from ..contracts import codec
from ..contracts.checkpoint import FactRecord
from ..contracts.durability import TurnScope
from ..contracts.errors import (
    ConfigurationError,
    EffectConflictError,
    EffectNotAppliedError,
    EffectUncertainError,
    ErrorCode,
    InvalidIdError,
    InvalidInputError,
    UsageError,
)
from ..contracts.events import EventCategory, KernelEvent
from ..contracts.receipts import (
    EffectAuthority,
    EffectExecution,
    EffectIdentity,
    EffectReceipt,
    ReceiptStatus,
)
from ..telemetry import effect_span
from ._completion import CompletionTokens
from ._events import EventRecorder
from ._expiry import external_key
from ._facts import parse_fact_ref
from ._keys import provider_idempotency_key
from ._limits import stored_within
from ._states import Confirmation, ConfirmationMode, Effect, EffectKind
from .approval import Approval, ConfirmationAnswer
from .streaming import ProgressRecorder, StepProgress

__all__ = [
    "CapabilityContext",
    "Deps",
    "ExternalCompletion",
    "StepEvents",
    "TurnInfo",
    "turn_deps",
    "uncertain_copy",
]

Deps = TypeVar("Deps", default=Any)
"""The host's dependencies a context carries (``define_agent(deps_type=...)``); a bare
``CapabilityContext`` is ``CapabilityContext[Any]``."""

UNKNOWN_OUTCOME = "the outcome is not known"
EVENT_DATA = stored_within(1)
"""An event's data is stored one level inside its event."""
PROGRESS_CHARS = 500
"""Characters of one progress message a consumer is shown."""


def uncertain_copy(receipt: EffectReceipt) -> EffectReceipt:
    """The checkpoint's copy of a receipt whose write is in doubt: always ``uncertain``.

    The ledger may hand over the receipt as it was when the outcome could not be recorded
    (``prepared``, or even ``completed`` when that write failed); the turn must still say
    "being verified" and keep the copy until an operator reconciles it.
    """
    if receipt.status is ReceiptStatus.UNCERTAIN:
        return receipt
    return receipt.model_copy(
        update={
            "status": ReceiptStatus.UNCERTAIN,
            "value": None,
            "error": receipt.error or UNKNOWN_OUTCOME,
        }
    )


def turn_deps(deps: object, default: object, deps_type: type[Any] | None) -> object:
    """The turn's deps (the run's, else the kernel's), refused before the turn starts when
    they are not an instance of the agent's ``deps_type``: a typed error, not an
    ``AttributeError`` deep in a capability."""
    chosen = default if deps is None else deps
    if deps_type is not None and not isinstance(chosen, deps_type):
        missing = " (none given: pass Kernel(deps=...) or run(deps=...))" if chosen is None else ""
        raise ConfigurationError(
            f"deps must be an instance of {deps_type.__qualname__}{missing}",
            code=ErrorCode.INVALID_DEPS,
            context={"expected": deps_type.__qualname__, "type": type(chosen).__qualname__},
        )
    return chosen


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class TurnInfo:
    """Who and what this turn is: thread, turn and trace ids, the user's text and selection."""

    thread_id: str
    turn_id: str
    trace_id: str
    text: str
    selection: Mapping[str, JsonValue] | None


class StepEvents:
    """``context.events.emit(type, data)``: events caused by this step's start event."""

    __slots__ = ("_cause", "_recorder", "_step_id")

    def __init__(self, recorder: EventRecorder, cause: KernelEvent, step_id: str) -> None:
        self._recorder = recorder
        self._cause = cause
        self._step_id = step_id

    def emit(
        self,
        type: str,
        data: dict[str, JsonValue] | None = None,
        *,
        category: EventCategory = EventCategory.TRACE,
    ) -> KernelEvent:
        """Record one event of this step.

        ``type`` and ``data`` are checked here, by the store's codec rule, so a capability gets
        the ``SerializationError`` (with the ``path`` of the offending value) where it emits,
        and the event holds exactly what the outbox will hold.
        """
        name = str(type)[:120]
        codec.check(type, what="event type")
        if data is not None:
            data = codec.round_trip(data, limits=EVENT_DATA, what=f"data of event {name!r}")
        return self._recorder.emit(
            type, data, cause=self._cause, step_id=self._step_id, category=category
        )

    def report(self, item: StepProgress) -> None:
        """Hand a step's progress to the turn's stream, when the turn is streamed."""
        if isinstance(self._recorder, ProgressRecorder):
            self._recorder.report(item)


@dataclass(frozen=True, slots=True)
class ExternalCompletion:
    """What ``complete_external`` brought to a parked step: its ``key``, the outside world's
    ``result`` (JSON) and the ``payload`` the capability kept when it parked."""

    key: str
    result: JsonValue
    payload: dict[str, JsonValue]


class CapabilityContext(Generic[Deps]):
    """Everything one step may use: the host's ports and typed ``deps``, the facts visible at
    step start, the turn identity, its own ids, deadline and event branch, and ``run_effect``.

    Built by the kernel for each step; a capability never constructs one. It is deliberately
    narrow so a capability can only reach the outside world through the host's ports and the
    durable effect ledger.
    """

    __slots__ = (
        "_completion",
        "_confirmation",
        "_effect",
        "_interrupted",
        "_receipts",
        "_request",
        "_scope",
        "answer",
        "approval",
        "capability_id",
        "deadline",
        "deps",
        "events",
        "execution_id",
        "external",
        "facts",
        "host_context",
        "ports",
        "step_id",
        "turn",
    )

    def __init__(
        self,
        *,
        scope: TurnScope,
        capability_id: str,
        effect: Effect,
        step_id: str,
        execution_id: str,
        turn: TurnInfo,
        ports: Mapping[str, Any],
        facts: Mapping[str, FactRecord],
        host_context: Mapping[str, Any],
        events: StepEvents,
        deadline: float,
        confirmation: Confirmation = ConfirmationMode.NONE,
        approval: Approval | None = None,
        answer: ConfirmationAnswer | None = None,
        request: JsonValue = None,
        deps: Any = None,
        external: ExternalCompletion | None = None,
        completion: CompletionTokens | None = None,
    ) -> None:
        self._scope = scope
        self._completion = completion
        self.deps: Deps = deps
        """The turn's dependencies (the run's, else the kernel's), typed by ``Deps``."""
        self._request = request
        self._effect = effect
        self._confirmation = confirmation
        self.approval = approval
        """The accepted kernel confirmation this step resumes (who, when, digest), if any."""
        self.answer = answer
        """The answer to this capability's own ``NeedsConfirmation``, when it is resumed."""
        self.external = external
        """The outside world's completion of this step's ``AwaitingExternal``, when it is
        resumed by ``complete_external``."""
        self._receipts: list[EffectReceipt] = []
        self._interrupted: list[str] = []
        self.capability_id = capability_id
        self.step_id = step_id
        self.execution_id = execution_id
        self.turn = turn
        self.ports = ports
        self.facts = facts
        self.host_context = host_context
        self.events = events
        self.deadline = deadline
        """Event-loop time (``asyncio.get_running_loop().time()``) the step must end by."""

    @property
    def receipts(self) -> list[EffectReceipt]:
        """Receipts of the effects this step ran (first runs and replays)."""
        return list(self._receipts)

    @property
    def interrupted(self) -> tuple[str, ...]:
        """Ledger keys whose last ``run_effect`` in this step stopped without an outcome: it
        was cancelled (a step timeout, or the capability's own timeout around it), failed
        part-way, or ended uncertain without the ledger's receipt attached. Only the ledger
        knows how far such a write got; the kernel reads it when the step ends, whatever the
        capability answered."""
        return tuple(self._interrupted)

    def remaining(self) -> float:
        """Seconds left before the step's deadline (pass it on as a provider timeout)."""
        return max(0.0, self.deadline - asyncio.get_running_loop().time())

    def report_progress(
        self, message: str, *, progress: float | None = None, total: float | None = None
    ) -> None:
        """Tell whoever streams the turn how far this step got (a ``StepProgress`` item).

        Advisory: never stored with the turn, dropped when nobody streams it (the inbox's
        progress log records it for watchers). ``message`` is cut to ``PROGRESS_CHARS``; a
        number that is not finite is left out."""
        text = str(message)[:PROGRESS_CHARS]
        item = StepProgress(
            self.step_id, self.capability_id, text, _number(progress), _number(total)
        )
        self.events.report(item)

    def completion_token(self, key: str) -> str:
        """The token a third party sends to complete this thread's step parked under ``key``
        (``POST /v1/threads/{thread_id}/external/{key}``, ``docs/external.md``): it completes
        that key of this thread and nothing else, once. The same for every run of the step, so
        a write that hands it out replays with it. Needs ``Kernel(completion_secret=...)``."""
        if self._completion is None:
            raise ConfigurationError(
                "completion tokens need Kernel(completion_secret=...)",
                context={"setting": "completion_secret"},
            )
        return self._completion.sign(self.turn.thread_id, external_key(key))

    def fact(self, ref: str, key: str | None = None) -> FactRecord | None:
        """The visible fact ``name@version`` (optionally with its key), if any."""
        parsed = parse_fact_ref(ref)
        if parsed is None:
            return None
        return self.facts.get(f"{parsed}" if key is None else f"{parsed}#{key}")

    async def run_effect(
        self, key: str, operation: Callable[[EffectAuthority], Awaitable[JsonValue]]
    ) -> EffectExecution:
        """Run an external write at most once per business key (spec, "Durable external
        effects"). The kernel prefixes ``key`` with the capability id; only ``effect="write"``
        capabilities may call it."""
        if self._effect != EffectKind.WRITE:
            raise UsageError(
                "only write capabilities may run effects",
                code=ErrorCode.EFFECT_NOT_ALLOWED,
                context={"capability_id": self.capability_id},
            )
        if not isinstance(key, str) or not key.strip():
            # The class of every other malformed key (too long, control characters), which
            # EffectIdentity refuses below: one code, one class.
            raise InvalidIdError(
                "an effect key must be non-blank text",
                code=ErrorCode.INVALID_IDEMPOTENCY_KEY,
                context={
                    "field": "idempotency_key",
                    "reason": "blank" if isinstance(key, str) else "not_a_string",
                    "capability_id": self.capability_id,
                },
            )
        if self.approval is None and (
            self._confirmation != ConfirmationMode.CAPABILITY
            or self.answer is None
            or not self.answer.accepted()
        ):
            # Consent first: a kernel confirmation resumes with an approval; a capability-owned
            # one must have asked (NeedsConfirmation) and be resumed with an accepting answer.
            raise UsageError(
                "a write may only run after the user's confirmation",
                code=ErrorCode.CONFIRMATION_REQUIRED,
                context={"capability_id": self.capability_id},
            )
        identity = EffectIdentity(f"{self.capability_id}:{key}", self.capability_id, self.step_id)
        ledger_key = identity.idempotency_key
        # The ik.effect span (the key only as a hash) is current while the provider is called.
        with effect_span(self.capability_id, ledger_key) as traced:
            try:
                # The step's validated input is the request: the ledger refuses the same key
                # for another input (EFFECT_REQUEST_MISMATCH), never replaying it.
                execution = await self._scope.run_effect(identity, operation, request=self._request)
            except EffectUncertainError as exc:
                traced.settled(ReceiptStatus.UNCERTAIN, exc.receipt, None)
                if exc.receipt is None:
                    # No receipt in hand (an adapter that does not attach it): the kernel reads
                    # the ledger for this key when the step ends, as for an interrupted call.
                    self._interrupt(ledger_key)
                else:
                    self._settled(ledger_key)
                    self._receipts.append(uncertain_copy(exc.receipt))
                raise
            except EffectNotAppliedError:
                traced.settled(ReceiptStatus.FAILED, None, None)
                self._settled(ledger_key)  # the host proved nothing happened: a known outcome
                raise
            except (UsageError, EffectConflictError, InvalidInputError):
                traced.settled("refused", None, None)
                raise  # refused before this call started anything (in progress, nested, closed)
            except BaseException:
                # Cancelled or failed part-way: remember the key, re-raise unchanged (a
                # cancellation is never swallowed). The kernel asks the ledger when the step
                # ends.
                self._interrupt(ledger_key)
                raise
            traced.settled(execution.receipt.status, execution.receipt, execution.replayed)
        self._settled(ledger_key)
        self._receipts.append(execution.receipt)
        return execution

    def _interrupt(self, ledger_key: str) -> None:
        """The call for the key ended without an outcome in hand: ask the ledger later."""
        if ledger_key not in self._interrupted:
            self._interrupted.append(ledger_key)

    def _settled(self, ledger_key: str) -> None:
        """A later call for the key ended with an outcome: it is no longer interrupted."""
        if ledger_key in self._interrupted:
            self._interrupted.remove(ledger_key)

    def provider_key(self, authority: EffectAuthority, *, tenant: str) -> str:
        """``provider_idempotency_key`` namespaced by ``tenant`` and this thread."""
        return provider_idempotency_key(authority, tenant=tenant, thread=self.turn.thread_id)
