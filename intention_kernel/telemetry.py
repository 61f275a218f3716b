"""OpenTelemetry spans and metrics for turns, model calls, steps, effects and the relay.

Why one module: it is the only place that imports ``opentelemetry`` (the ``otel`` extra, the
API only; the host brings the SDK and its exporter). Without the package every helper is a
shared no-op; with the API but no SDK configured, a turn checks the two global providers and
does nothing else. With an SDK whose sampler drops the turn, the turn's span is not recording
and no child span or further attribute is built (its metrics are still recorded).

Cost (``bench/telemetry_overhead.py``): almost all of it is the SDK's own span and metric
work; here each span gets its attributes at its start and those known later in one call at
its end, metric attribute sets are built once per kernel, and the redactor's envelope once
per turn.

What is emitted (see ``docs/observability.md``):

* spans ``ik.turn``, ``ik.plan``, ``chat {model}`` (the OpenTelemetry
  GenAI conventions, ``gen_ai.*``), ``ik.step {capability}`` and ``ik.effect {capability}``;
* metrics ``ik.turn.duration``, ``ik.turn.replays``, ``ik.lease.wait``, ``ik.effects``,
  ``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage`` (with the GenAI
  conventions' bucket boundaries), ``ik.receipts.uncertain`` (``UncertainReceipts``),
  ``ik.relay.delivery.lag`` and ``ik.relay.dead_letters`` (``RelayTelemetry``);
* a caller's W3C trace context continued (``continued_trace``, for the HTTP service).

Span attributes never carry message text, provider payloads or raw idempotency keys (a key is
a sha256 prefix); those that come from the host pass the host's redactor first.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Protocol, Self

from .__version__ import __version__
from .contracts.errors import ModelGatewayError
from .contracts.events import KernelEvent
from .contracts.receipts import EffectReceipt, ReceiptStatus

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
    from opentelemetry.trace import Span, SpanKind, StatusCode, TracerProvider

    AVAILABLE = True
except ImportError:  # pragma: no cover - the otel extra is not installed
    AVAILABLE = False

__all__ = [
    "AVAILABLE",
    "RelayTelemetry",
    "Telemetry",
    "UncertainReceipts",
    "continued_trace",
    "db_system",
    "effect_span",
    "key_hash",
    "model_span",
    "plan_span",
    "step_span",
]

SCOPE = "intention_kernel"
"""The instrumentation scope name of every tracer and meter here."""

Attributes = dict[str, Any]
Redactor = Callable[[KernelEvent], KernelEvent]


def key_hash(key: str) -> str:
    """What a span shows of an idempotency key: enough to match two spans, never the key."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def db_system(store: object) -> str | None:
    """The ``db.system.name`` of a store, from its class (the kernel sees only the protocol)."""
    name = type(store).__name__.lower()
    if "sqlite" in name:
        return "sqlite"
    if "postgres" in name:
        return "postgresql"
    return None


@contextlib.contextmanager
def continued_trace(headers: Mapping[str, str]) -> Iterator[None]:
    """The caller's trace current while the block runs: ``headers`` (a request's, read
    case-insensitively) carry it as W3C ``traceparent``, with ``tracestate`` (the global
    propagator's formats; by default W3C trace context and baggage). A turn started in the block,
    or a task created in it, is then a child of the caller's span. Without the package or a
    ``traceparent``, nothing changes; a malformed one is ignored (the turn starts a new trace).
    A span already current (the host's ASGI instrumentation continued the trace in its server
    span) stays the parent."""
    if (
        not AVAILABLE
        or headers.get("traceparent") is None
        or trace.get_current_span().get_span_context().is_valid
    ):
        yield
        return
    token = otel_context.attach(propagate.extract(headers))
    try:
        yield
    finally:
        otel_context.detach(token)


_GEN_AI_PROVIDERS = {
    "google": "gcp.gemini",
    "google-gla": "gcp.gemini",
    "gemini": "gcp.gemini",
    "google-cloud": "gcp.vertex_ai",
    "google-vertex": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "bedrock": "aws.bedrock",
    "bedrock-mantle": "aws.bedrock",
    "xai": "x_ai",
    "grok": "x_ai",
    "azure": "azure.ai.openai",
}
"""Provider names as gateways give them (Pydantic AI's, the model-string prefixes) that the
GenAI conventions know by another ``gen_ai.provider.name``; the others are kept as given
(``openai``, ``anthropic``, ``groq``, ``cohere``, ``deepseek`` are already the conventions')."""


def _gen_ai_provider(name: str) -> str:
    """The conventions' well-known ``gen_ai.provider.name`` for a gateway's provider name."""
    return _GEN_AI_PROVIDERS.get(name, name)


def _error_type(exc: BaseException) -> str:
    """``error.type``: the HTTP status a provider answered, the failure's kind when a gateway
    classified it without one (``timeout``, ``connection``...), else the exception's fully
    qualified class name (the conventions' low-cardinality choices)."""
    if isinstance(exc, ModelGatewayError):
        context = exc.context
        status = context.get("status")
        if isinstance(status, int) and not isinstance(status, bool):
            return str(status)
        kind = context.get("kind")
        if isinstance(kind, str) and kind:
            return kind
    kind_of = type(exc)
    module = kind_of.__module__
    return kind_of.__qualname__ if module == "builtins" else f"{module}.{kind_of.__qualname__}"


def _clean(value: object) -> Any:
    """An attribute value OpenTelemetry accepts, or ``None`` (dropped)."""
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


class _Null:
    """Every handle when nothing is recorded: each method does nothing."""

    __slots__ = ()
    traceparent: str | None = None

    def __enter__(self) -> _Null:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def acquired(self, since: float) -> None:
        return None

    def outcome(self, replayed: bool) -> None:
        return None

    def raised(self, exc: BaseException) -> None:
        return None

    def planned(self, steps: int, held: Iterable[tuple[str, str]], clarifications: int) -> None:
        return None

    def answered(
        self,
        *,
        provider: str | None,
        model: str | None,
        finish_reason: str | None,
        input_tokens: int,
        output_tokens: int,
    ) -> None:
        return None

    def ended(self, status: str) -> None:
        return None

    def settled(self, status: str, receipt: EffectReceipt | None, replayed: bool | None) -> None:
        return None


NULL = _Null()


_TURN_BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""``ik.turn.duration`` buckets (s): from a replay's tens of milliseconds to a turn of several
model calls and slow providers (minutes); the SDK's default ones put every turn under 5 s in
one bucket."""
_LEASE_BOUNDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
"""``ik.lease.wait`` buckets (s): a free lease and a checkpoint load take milliseconds; waiting
behind another delivery of the thread lasts as long as its turn."""
_OPERATION_BOUNDS = tuple(round(0.01 * 2**n, 2) for n in range(14))
"""``gen_ai.client.operation.duration`` buckets (0.01, 0.02, 0.04, ... 81.92 s), as the GenAI
conventions advise."""
_TOKEN_BOUNDS = tuple(4**n for n in range(14))
"""``gen_ai.client.token.usage`` buckets (1, 4, 16, ... 67108864), as the conventions advise."""

_POINTS_KEPT = 4096
"""How many metric attribute sets one ``Telemetry`` keeps built. Their values are agent,
outcome, store, capability, receipt status, provider, model and task names (never a thread or
turn id), so a kernel has a few dozen; past the bound they are built per point."""

_DURATION = ("ik.agent.id", "ik.turn.outcome")
_REPLAYS = ("ik.agent.id",)
_LEASE = ("ik.agent.id", "db.system.name")
_EFFECTS = ("ik.capability.id", "ik.receipt.status")
_TOKENS = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "ik.model.task",
    "gen_ai.token.type",
)
_OPERATION = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "ik.model.task",
    "gen_ai.response.model",
    "error.type",
)


def _cleaned(data: Mapping[str, object]) -> Attributes:
    return {k: v for k, v in ((k, _clean(v)) for k, v in data.items()) if v is not None}


class Telemetry:
    """The tracer and instruments of one kernel; ``Kernel(tracer_provider=, meter_provider=)``
    choose the providers (default: the global ones, so a host that configures the SDK once
    gets everything). ``redact`` is the kernel's event redactor, applied to span attributes.
    """

    __slots__ = (
        "_durations",
        "_effects",
        "_lease",
        "_operations",
        "_own_meter",
        "_own_tracer",
        "_points",
        "_redact",
        "_replays",
        "_token_points",
        "_tokens",
        "enabled",
        "tracer",
    )

    def __init__(
        self,
        *,
        tracer_provider: object | None = None,
        meter_provider: object | None = None,
        redact: Redactor | None = None,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled and AVAILABLE
        self._redact = redact
        self._points: dict[tuple[str | None, ...], Attributes] = {}
        self._token_points: dict[tuple[str | None, str, str], tuple[Attributes, Attributes]] = {}
        if not self.enabled:
            return
        self._own_tracer = isinstance(tracer_provider, TracerProvider)
        self._own_meter = isinstance(meter_provider, MeterProvider)
        self.tracer = trace.get_tracer(
            SCOPE,
            __version__,
            tracer_provider=tracer_provider
            if isinstance(tracer_provider, TracerProvider)
            else None,
        )
        meter = metrics.get_meter(
            SCOPE,
            __version__,
            meter_provider=meter_provider if isinstance(meter_provider, MeterProvider) else None,
        )
        self._durations = meter.create_histogram(
            "ik.turn.duration",
            unit="s",
            description="Duration of CompiledAgent.run by outcome.",
            explicit_bucket_boundaries_advisory=_TURN_BOUNDS,
        )
        self._replays = meter.create_counter(
            "ik.turn.replays", unit="{turn}", description="Turns answered from the stored result."
        )
        self._lease = meter.create_histogram(
            "ik.lease.wait",
            unit="s",
            description="From calling with_turn until the turn runs: lease wait plus load.",
            explicit_bucket_boundaries_advisory=_LEASE_BOUNDS,
        )
        self._effects = meter.create_counter(
            "ik.effects", unit="{effect}", description="run_effect calls by final receipt status."
        )
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=_TOKEN_BOUNDS,
        )
        self._operations = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=_OPERATION_BOUNDS,
        )

    def turn(
        self,
        *,
        agent_id: str,
        agent_version: str,
        fingerprint: str,
        thread_id: str,
        turn_id: str,
        store: str | None,
    ) -> _Turn | _Null:
        """The ``ik.turn`` span (current while the turn runs) and the turn's metrics."""
        if not self.enabled:
            return NULL
        traced, metered = self.traced(), self.metered()
        if not traced and not metered:
            return NULL  # no SDK configured: nothing would record anything
        turn = _Turn(self, agent_id, agent_version, fingerprint, thread_id, turn_id, store)
        turn.traced, turn.metered = traced, metered
        return turn

    def traced(self) -> bool:
        """Spans go somewhere: a provider was given, or the host configured a global SDK one
        (until then the global provider is a proxy that records nothing)."""
        if self._own_tracer:
            return True
        found = trace.get_tracer_provider()
        return not isinstance(found, trace.ProxyTracerProvider | trace.NoOpTracerProvider)

    def metered(self) -> bool:
        """Metrics go somewhere (as ``traced``, for the meter provider)."""
        if self._own_meter:
            return True
        name = type(metrics.get_meter_provider()).__name__
        return name not in ("_ProxyMeterProvider", "NoOpMeterProvider")

    def token_points(
        self, provider: str | None, model: str, task: str
    ) -> tuple[Attributes, Attributes]:
        """The input and output points of ``gen_ai.client.token.usage`` for one model call
        (built once per provider, model and task, as ``point``)."""
        key = (provider, model, task)
        found = self._token_points.get(key)
        if found is None:
            asked = ("tokens", "chat", provider, model, task)
            found = (
                self.point((*asked, "input"), _TOKENS),
                self.point((*asked, "output"), _TOKENS),
            )
            if len(self._token_points) < _POINTS_KEPT:
                self._token_points[key] = found
        return found

    def point(self, key: tuple[str | None, ...], names: tuple[str, ...]) -> Attributes:
        """The attributes of a metric point: ``names`` paired with ``key[1:]`` (``key[0]``
        names the metric; ``None`` values are left out). Built once per distinct key and
        shared: the SDK copies what it keeps, and nothing here changes a built one."""
        found = self._points.get(key)
        if found is None:
            found = {n: v for n, v in zip(names, key[1:], strict=True) if v is not None}
            if len(self._points) < _POINTS_KEPT:
                self._points[key] = found
        return found


_CURRENT: ContextVar[_Turn | None] = ContextVar("intention_kernel_turn", default=None)
"""The turn this code runs in: where model, step and effect spans and metrics go."""


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
        span_kind: SpanKind | None = None,
    ) -> None:
        self.turn = turn
        self._kind = kind
        telemetry = turn.telemetry
        if attributes is not None and telemetry._redact is not None:
            attributes = turn.shown(kind, attributes)
        self.span: Span = telemetry.tracer.start_span(
            name, kind=SpanKind.INTERNAL if span_kind is None else span_kind, attributes=attributes
        )
        self.ended_with: Attributes = {}
        self._token: object = None

    def __enter__(self) -> Self:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
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
                span.set_status(StatusCode.ERROR, error)
            if ended:
                span.set_attributes(ended)
        finally:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            span.end()


class _Turn:
    """One ``CompiledAgent.run``: its span, its outcome and its duration."""

    __slots__ = (
        "_envelope",
        "_started",
        "_token",
        "_turn_token",
        "_waited_ms",
        "agent_id",
        "attributes",
        "ids",
        "metered",
        "recording",
        "replayed",
        "span",
        "store",
        "telemetry",
        "traced",
        "traceparent",
    )

    def __init__(
        self,
        telemetry: Telemetry,
        agent_id: str,
        agent_version: str,
        fingerprint: str,
        thread_id: str,
        turn_id: str,
        store: str | None,
    ) -> None:
        self.telemetry = telemetry
        self.agent_id = agent_id
        self.ids = (thread_id, turn_id)
        self.store = store
        self.attributes: Attributes = {
            "ik.agent.id": agent_id,
            "ik.agent.version": agent_version,
            "ik.agent.fingerprint": fingerprint,
            "ik.thread.id": thread_id,
            "ik.turn.id": turn_id,
        }
        if store is not None:
            self.attributes["db.system.name"] = store
        self.replayed = False
        self.recording = False
        self.traceparent: str | None = None
        self._envelope: KernelEvent | None = None
        self._waited_ms: float | None = None
        self._token: object = None
        self.traced = True
        self.metered = True

    def shown(self, kind: str, attributes: Attributes) -> Attributes:
        """``attributes`` after the host's redactor: the ``data`` of a ``telemetry.<kind>``
        event of this turn (one envelope per turn, validated once, copied per call); values
        it turns into something that is not an attribute value are dropped."""
        redact = self.telemetry._redact
        if redact is None:
            return attributes
        if self._envelope is None:
            self._envelope = KernelEvent(
                id="evt_telemetry.0",
                type="telemetry.turn",
                occurred_at=datetime.now(UTC),
                thread_id=self.ids[0],
                turn_id=self.ids[1],
                sequence=0,
                correlation_id="telemetry",
            )
        event = self._envelope.model_copy(
            update={"type": f"telemetry.{kind}", "data": dict(attributes)}
        )
        return _cleaned(redact(event).data)

    def __enter__(self) -> _Turn:
        self._started = time.perf_counter()
        # The turn's attributes go to the sampler too (one that samples by agent sees them).
        attributes = self.attributes
        if self.telemetry._redact is not None:
            attributes = self.shown("turn", attributes)
        self.span = (
            self.telemetry.tracer.start_span("ik.turn", attributes=attributes)
            if self.traced
            else trace.INVALID_SPAN
        )
        self.recording = self.span.is_recording()
        if self.recording:
            context = self.span.get_span_context()
            self.traceparent = (
                f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
            )
            self._token = otel_context.attach(trace.set_span_in_context(self.span))
        self._turn_token = _CURRENT.set(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _CURRENT.reset(self._turn_token)
        if exc is None:
            outcome = "replayed" if self.replayed else "committed"
        elif isinstance(exc, asyncio.CancelledError):
            outcome = "cancelled"
        elif getattr(exc, "code", None) == "TURN_TIMEOUT":
            outcome = "timeout"
        else:
            outcome = "error"
        telemetry = self.telemetry
        if self.metered:
            measured = telemetry.point(("duration", self.agent_id, outcome), _DURATION)
            telemetry._durations.record(time.perf_counter() - self._started, measured)
            if self.replayed:
                telemetry._replays.add(1, telemetry.point(("replays", self.agent_id), _REPLAYS))
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
        span = self.span
        if self.recording:
            ended: Attributes = {}
            if self._waited_ms is not None:
                # An attribute and not a span of its own: a span per turn costs more than it
                # shows.
                ended["ik.lease.wait_ms"] = self._waited_ms
            ended["ik.turn.outcome"] = outcome
            ended["ik.turn.replayed"] = self.replayed
            if exc is not None:
                ended["error.type"] = error = _error_type(exc)
                span.set_status(StatusCode.ERROR, error)
            span.set_attributes(ended)
        span.end()

    def acquired(self, since: float) -> None:
        """The turn got its lease and loaded its checkpoint: ``since`` is the
        ``time.perf_counter()`` at which ``with_turn`` was called."""
        waited = time.perf_counter() - since
        if self.metered:
            telemetry = self.telemetry
            measured = telemetry.point(("lease", self.agent_id, self.store), _LEASE)
            telemetry._lease.record(waited, measured)
        if self.recording:
            self._waited_ms = round(waited * 1000, 3)  # set on the span as it ends

    def outcome(self, replayed: bool) -> None:
        self.replayed = replayed


_turn: Callable[[], _Turn | None] = _CURRENT.get
"""The current turn (always ``None`` without the package: no turn is ever set then)."""


# ------------------------------------------------------------------- plan


class _Plan(_Span):
    __slots__ = ()

    def planned(self, steps: int, held: Iterable[tuple[str, str]], clarifications: int) -> None:
        """What the plan decided; each held step is a span event ``ik.step.held``."""
        held = list(held)
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
            self._span = _Span(turn, f"chat {model}", "chat", self.attributes, SpanKind.CLIENT)

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
        self.span.set_status(StatusCode.ERROR, error)


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


# ------------------------------------------------------------------- operators and the relay


class ReceiptLister(Protocol):
    """The store's operator query this needs (every ``DurabilityStore`` has it)."""

    async def list_receipts(
        self, *, status: ReceiptStatus | None = None, thread_id: str | None = None, limit: int = 100
    ) -> list[EffectReceipt]: ...


class UncertainReceipts:
    """The ``ik.receipts.uncertain`` gauge: receipts waiting for an operator, as the store
    says (``list_receipts(status=UNCERTAIN)``: uncertain ones and interrupted ``prepared``
    ones), so every process that runs it reports the same number.

    The gauge reports what the last ``refresh()`` read (nothing before the first one): call it
    on a schedule, or run ``watch(interval)`` as a task. A count at ``limit`` means "at least".
    Why not count in the turns: a receipt becomes uncertain in one process and is reconciled
    in another (an operator's command line), so only the store knows how many are left.
    """

    def __init__(
        self, store: ReceiptLister, *, meter_provider: object | None = None, limit: int = 1000
    ) -> None:
        self.store = store
        self.limit = limit
        self.count: int | None = None
        if AVAILABLE:
            meter = metrics.get_meter(
                SCOPE,
                __version__,
                meter_provider=meter_provider
                if isinstance(meter_provider, MeterProvider)
                else None,
            )
            meter.create_observable_gauge(
                "ik.receipts.uncertain",
                callbacks=[self._observe],
                unit="{receipt}",
                description="Receipts waiting for an operator (capped at the query limit).",
            )

    async def refresh(self) -> int:
        """Read the store now; returns the count the gauge reports from now on."""
        found = await self.store.list_receipts(status=ReceiptStatus.UNCERTAIN, limit=self.limit)
        self.count = len(found)
        return self.count

    async def watch(self, interval: float = 30.0) -> None:
        """Refresh every ``interval`` seconds until cancelled; a failed read keeps the last
        count (a store outage must not stop the gauge)."""
        while True:
            with contextlib.suppress(Exception):
                await self.refresh()
            await asyncio.sleep(interval)

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        return [] if self.count is None else [Observation(self.count)]


class RelayTelemetry:
    """The relay's metrics: ``ik.relay.delivery.lag`` (from the event's ``occurred_at`` to
    the sink's acknowledgement) and ``ik.relay.dead_letters``."""

    __slots__ = ("_dead", "_lag", "enabled", "relay_id")

    def __init__(self, relay_id: str, *, meter_provider: object | None = None) -> None:
        self.relay_id = relay_id
        self.enabled = AVAILABLE
        if not AVAILABLE:
            return
        meter = metrics.get_meter(
            SCOPE,
            __version__,
            meter_provider=meter_provider if isinstance(meter_provider, MeterProvider) else None,
        )
        self._lag = meter.create_histogram(
            "ik.relay.delivery.lag",
            unit="s",
            description="From an event's occurred_at to the sink's acknowledgement.",
        )
        self._dead = meter.create_counter(
            "ik.relay.dead_letters", unit="{event}", description="Events dead-lettered."
        )

    def delivered(self, events: Sequence[KernelEvent]) -> None:
        if not self.enabled or not events:
            return
        now = datetime.now(UTC)
        measured: Mapping[str, str] = {"ik.relay.id": self.relay_id}
        for event in events:
            self._lag.record(max(0.0, (now - event.occurred_at).total_seconds()), measured)

    def dead_lettered(self, outcome: str) -> None:
        """One event dead-lettered after a sink outcome (``retry`` past the last attempt, or
        ``reject``)."""
        if self.enabled:
            self._dead.add(1, {"ik.relay.id": self.relay_id, "ik.relay.outcome": outcome})
