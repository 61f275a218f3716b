"""One kernel's tracer and instruments (``Telemetry``), and the turn it records: the ``ik.turn``
span and the turn's metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from types import TracebackType

from ..__version__ import __version__
from ..contracts.events import KernelEvent
from . import _otel
from ._common import NULL, Attributes, Redactor, _cleaned, _error_type, _Null
from ._inbox import InboxInstruments, WorkerMetrics
from ._otel import SCOPE

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


class Telemetry:
    """The tracer and instruments of one kernel; ``Kernel(tracer_provider=, meter_provider=)``
    choose the providers (default: the global ones, so a host that configures the SDK once
    gets everything). ``redact`` is the kernel's event redactor, applied to span attributes.
    """

    __slots__ = (
        "_durations",
        "_effects",
        "_inbox",
        "_lease",
        "_meter",
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
        self.enabled = enabled and _otel.AVAILABLE
        self._redact = redact
        self._points: dict[tuple[str | None, ...], Attributes] = {}
        self._token_points: dict[tuple[str | None, str, str], tuple[Attributes, Attributes]] = {}
        self._inbox: InboxInstruments | None = None
        if not self.enabled:
            return
        self._own_tracer = isinstance(tracer_provider, _otel.TracerProvider)
        self._own_meter = isinstance(meter_provider, _otel.MeterProvider)
        self.tracer = _otel.trace.get_tracer(
            SCOPE,
            __version__,
            tracer_provider=tracer_provider
            if isinstance(tracer_provider, _otel.TracerProvider)
            else None,
        )
        meter = _otel.library_meter(meter_provider)
        self._meter = meter
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

    def inbox(self, agent_id: str) -> WorkerMetrics | _Null:
        """What a worker of agent ``agent_id`` records for the requests it runs (``_inbox``);
        its instruments are made once per ``Telemetry``."""
        if not self.enabled:
            return NULL
        if self._inbox is None:
            self._inbox = InboxInstruments(self._meter)
        return WorkerMetrics(self, self._inbox, agent_id)

    def traced(self) -> bool:
        """Spans go somewhere: a provider was given, or the host configured a global SDK one
        (until then the global provider is a proxy that records nothing)."""
        if self._own_tracer:
            return True
        found = _otel.trace.get_tracer_provider()
        return not isinstance(
            found, _otel.trace.ProxyTracerProvider | _otel.trace.NoOpTracerProvider
        )

    def metered(self) -> bool:
        """Metrics go somewhere (as ``traced``, for the meter provider)."""
        if self._own_meter:
            return True
        name = type(_otel.metrics.get_meter_provider()).__name__
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
            else _otel.trace.INVALID_SPAN
        )
        self.recording = self.span.is_recording()
        if self.recording:
            context = self.span.get_span_context()
            self.traceparent = (
                f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
            )
            self._token = _otel.context.attach(_otel.trace.set_span_in_context(self.span))
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
            _otel.context.detach(self._token)  # type: ignore[arg-type]
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
                span.set_status(_otel.StatusCode.ERROR, error)
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
