"""The spans inside a turn: ``ik.plan``, ``chat {model}`` (the GenAI conventions),
``ik.step {capability}`` and ``ik.effect {capability}``, each a child of the current turn."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Self

from ..contracts.receipts import EffectReceipt
from . import _otel
from ._common import NULL, Attributes, _error_type, _gen_ai_provider, _Null, key_hash
from ._turns import _EFFECTS, _OPERATION, _Turn, _turn


class _Span:
    """A child span of the current turn, current itself while its block runs.

    Its attributes are given when it starts (samplers and processors see them); those known
    only later are gathered in ``ended_with`` and set in one call as it ends: each call into
    the SDK's attribute handling costs more than the attributes themselves.
    """

    __slots__ = ("_kind", "_token", "ended_with", "span", "turn")

    def __init__(
        self,
        turn: _Turn,
        name: str,
        kind: str,
        attributes: Attributes | None,
        span_kind: _otel.SpanKind | None = None,
    ) -> None:
        self.turn = turn
        self._kind = kind
        telemetry = turn.telemetry
        if attributes is not None and telemetry._redact is not None:
            attributes = turn.shown(kind, attributes)
        self.span: _otel.Span = telemetry.tracer.start_span(
            name,
            kind=_otel.SpanKind.INTERNAL if span_kind is None else span_kind,
            attributes=attributes,
        )
        self.ended_with: Attributes = {}
        self._token: object = None

    def __enter__(self) -> Self:
        self._token = _otel.context.attach(_otel.trace.set_span_in_context(self.span))
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self.span
        try:
            ended = self.ended_with
            if ended and self.turn.telemetry._redact is not None:
                ended = self.turn.shown(self._kind, ended)
            if exc is not None:
                ended["error.type"] = error = _error_type(exc)
                span.set_status(_otel.StatusCode.ERROR, error)
            if ended:
                span.set_attributes(ended)
        finally:
            _otel.context.detach(self._token)  # type: ignore[arg-type]
            span.end()


# ------------------------------------------------------------------- plan


class _Plan(_Span):
    __slots__ = ()

    def planned(
        self, steps: int, held: Iterable[tuple[str, str]], clarifications: int, round: int = 1
    ) -> None:
        """What the plan (of round ``round``) decided; each held step is a span event
        ``ik.step.held``."""
        held = list(held)
        self.ended_with["ik.plan.round"] = round
        self.ended_with["ik.plan.steps"] = steps
        self.ended_with["ik.plan.held"] = len(held)
        self.ended_with["ik.plan.clarifications"] = clarifications
        for capability, reason in held:
            self.span.add_event(
                "ik.step.held", {"ik.capability.id": capability, "ik.hold.reason": reason}
            )


def plan_span() -> _Plan | _Null:
    """The ``ik.plan`` span: planning and resumption, with a repair call nested in it."""
    turn = _turn()
    if turn is None or not turn.recording:
        return NULL
    return _Plan(turn, "ik.plan", "plan", None)


# ------------------------------------------------------------------- model calls


class _Optional:
    """A span when the turn is recorded, ``None`` otherwise (the metrics are kept either way)."""

    __slots__ = ("_span",)

    _span: _Span | None

    def __enter__(self) -> Self:
        if self._span is not None:
            self._span.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._span is not None:
            self._span.__exit__(kind, exc, tb)


class _Chat(_Optional):
    """A model call after the OpenTelemetry GenAI conventions, current while the gateway runs
    (an instrumented HTTP client's span nests under it)."""

    __slots__ = ("_started", "attributes", "responded", "task", "turn")

    def __init__(self, turn: _Turn, task: str, provider: str | None, model: str) -> None:
        self.turn = turn
        self.task = task
        self.responded: str | None = None
        self._started = 0.0
        if provider is not None:
            provider = _gen_ai_provider(provider)
        self.attributes: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "ik.model.task": task,
        }
        if provider is not None:
            self.attributes["gen_ai.provider.name"] = provider
            self.attributes["gen_ai.system"] = provider
        self._span: _Span | None = None
        if turn.recording:
            self._span = _Span(
                turn, f"chat {model}", "chat", self.attributes, _otel.SpanKind.CLIENT
            )

    def answered(
        self,
        *,
        provider: str | None,
        model: str | None,
        finish_reason: str | None,
        input_tokens: int,
        output_tokens: int,
    ) -> None:
        """The provider's answer: who answered, why it stopped, what it cost."""
        if provider is not None:
            provider = _gen_ai_provider(provider)
        if provider is not None and "gen_ai.provider.name" not in self.attributes:
            self.attributes["gen_ai.provider.name"] = provider
            self.attributes["gen_ai.system"] = provider
        self.responded = model
        if self.turn.metered:
            telemetry = self.turn.telemetry
            named = self.attributes.get("gen_ai.provider.name")
            asked = self.attributes["gen_ai.request.model"]
            spent_in, spent_out = telemetry.token_points(named, asked, self.task)
            record = telemetry._tokens.record
            record(input_tokens, spent_in)
            record(output_tokens, spent_out)
        if self._span is None:
            return
        answered = self._span.ended_with
        answered["gen_ai.usage.input_tokens"] = input_tokens
        answered["gen_ai.usage.output_tokens"] = output_tokens
        if provider is not None:
            answered["gen_ai.provider.name"] = provider
            answered["gen_ai.system"] = provider
        if model is not None:
            answered["gen_ai.response.model"] = model
        if finish_reason is not None:
            answered["gen_ai.response.finish_reasons"] = [finish_reason]

    def __enter__(self) -> Self:
        self._started = time.perf_counter()
        return super().__enter__()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        turn = self.turn
        if turn.metered:
            telemetry = turn.telemetry
            named = self.attributes.get("gen_ai.provider.name")
            asked = self.attributes["gen_ai.request.model"]
            error = None if exc is None else _error_type(exc)
            key = ("operation", "chat", named, asked, self.task, self.responded, error)
            measured = telemetry.point(key, _OPERATION)
            telemetry._operations.record(time.perf_counter() - self._started, measured)
        super().__exit__(kind, exc, tb)


def model_span(task: str, provider: str | None, model: str) -> _Chat | _Null:
    """The ``chat {model}`` span and the model metrics of one model call."""
    turn = _turn()
    if turn is None:
        return NULL
    if provider is not None and model.startswith(f"{provider}:"):
        model = model[len(provider) + 1 :]  # a model label "provider:model" names the model
    return _Chat(turn, task, provider, model)


# ------------------------------------------------------------------- steps and effects


class _Step(_Span):
    __slots__ = ()

    def ended(self, status: str) -> None:
        """How the step ended (``StepStatus``)."""
        self.ended_with["ik.step.status"] = status

    def raised(self, exc: BaseException) -> None:
        """The capability raised ``exc``, which its step reports as a failure: ``error.type``
        (the class and code, never the message) and an error status, as if it had escaped."""
        self.ended_with["error.type"] = error = _error_type(exc)
        self.span.set_status(_otel.StatusCode.ERROR, error)


def step_span(capability: str, version: str, step_id: str, effect: str) -> _Step | _Null:
    """The ``ik.step {capability}`` span, current while the capability runs."""
    turn = _turn()
    if turn is None or not turn.recording:
        return NULL
    return _Step(
        turn,
        f"ik.step {capability}",
        "step",
        {
            "ik.capability.id": capability,
            "ik.capability.version": version,
            "ik.capability.effect": effect,
            "ik.step.id": step_id,
        },
    )


class _Effect(_Optional):
    __slots__ = ("capability", "status", "turn")

    def __init__(self, turn: _Turn, capability: str, span: _Span | None) -> None:
        self.turn = turn
        self.capability = capability
        self._span = span
        self.status = "error"

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and self.status == "error":
            self.status = "interrupted" if isinstance(exc, asyncio.CancelledError) else "error"
        if self.turn.metered:
            telemetry = self.turn.telemetry
            measured = telemetry.point(("effects", self.capability, self.status), _EFFECTS)
            telemetry._effects.add(1, measured)
        if self._span is not None:
            self._span.ended_with["ik.receipt.status"] = self.status
            self._span.__exit__(kind, exc, tb)

    def settled(self, status: str, receipt: EffectReceipt | None, replayed: bool | None) -> None:
        """The call's final status (a ``ReceiptStatus``, or ``refused`` when the ledger turned
        it away before anything started) and, when known, its receipt."""
        self.status = str(status)
        if self._span is None:
            return
        found = self._span.ended_with
        if receipt is not None:
            found["ik.receipt.id"] = receipt.id
            found["ik.receipt.attempts"] = receipt.attempts
        if replayed is not None:
            found["ik.effect.replayed"] = replayed


def effect_span(capability: str, ledger_key: str) -> _Effect | _Null:
    """The ``ik.effect {capability}`` span (current while the provider is called) and the
    ``ik.effects`` count. The key is shown only as ``key_hash``."""
    turn = _turn()
    if turn is None:
        return NULL
    span: _Span | None = None
    if turn.recording:
        span = _Span(
            turn,
            f"ik.effect {capability}",
            "effect",
            {"ik.capability.id": capability, "ik.effect.key_sha256": key_hash(ledger_key)},
        )
    return _Effect(turn, capability, span)
