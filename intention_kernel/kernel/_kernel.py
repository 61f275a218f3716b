"""``Kernel``: the host's wiring (durability, models, ports, limits, redactor, sinks, clock, ids).

``kernel.compile(agent)`` validates the definition, fingerprints its manifest and returns a
``CompiledAgent`` that runs turns with this wiring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from ..contracts.durability import Durability
from ..contracts.errors import ConfigurationError
from ..contracts.events import EventCategory
from ..contracts.gateway import ModelGateway
from ..contracts.ids import new_id
from ..contracts.receipts import EffectReceipt
from ..contracts.sinks import EventSink
from ..telemetry import FlowMetrics, Telemetry
from ._agent import AgentDefinition
from ._budgets import Budget, Limit, Price, check_limits, check_prices
from ._compat import Compatibility, Migration
from ._compile import compile_manifest
from ._completion import CompletionTokens
from ._events import Redactor
from ._failures import ErrorClassifier
from ._flow import build_gate, flow_counters
from ._limits import KernelLimits
from ._pipeline import AgentRuntime
from ._pipeline.state import Composition
from ._prompts import Catalog
from ._routing import ModelRoute, is_gateway, routes_for
from ._runtime import CompiledAgent
from ._visibility import FactView

__all__ = ["Clock", "IdFactory", "Kernel"]

Clock = Callable[[], datetime]
"""The kernel's clock: returns the current time, timezone-aware."""
IdFactory = Callable[[str], str]
"""The kernel's id generator: a prefix (``trace``, ``ev``, ``exec``) to a new unique id."""


def known_providers() -> frozenset[str]:
    """The providers model strings name (``openai``, ``anthropic``...)."""
    from ..models._resolve import PROVIDERS

    return frozenset(PROVIDERS)


def _now() -> datetime:
    return datetime.now(UTC)


class Kernel:
    """The host's wiring: one durability adapter, a model (a gateway or a model string), the
    ports capabilities may use, limits, an event redactor, in-process event sinks, and the clock
    and id generator the kernel records with.

    Construction checks the wiring at once (``ConfigurationError`` lists every problem);
    ``compile(agent)`` then binds an agent definition to it. One kernel serves many agents.
    ``model`` may be left out when every agent names its models (``define_agent(models=...)``).
    ``clock`` (``() -> datetime``) and ``ids`` (``prefix -> id``) default to the wall clock
    and ``new_id``; fixed ones make a recorded conversation replay to the byte.
    ``tracer_provider`` and ``meter_provider`` (OpenTelemetry SDK providers) receive the
    kernel's spans and metrics; by default the global ones, which cost next to nothing until
    the host configures the SDK (see ``docs/observability.md``). ``classify_error`` maps an
    exception a capability raised to a ``StepError`` (``retryable``, ``code``), or ``None`` for
    the kernel's default (``OSError`` and ``TimeoutError`` retryable; see ``docs/kernel.md``).
    ``deps`` is what capabilities see as ``context.deps`` (a run may pass its own); an agent
    with a ``deps_type`` refuses a turn whose deps are not an instance (``INVALID_DEPS``).
    ``budgets`` (``Budget``) bound the model spend of every agent, ``provider_limits`` map a
    provider to its ``Limit`` (calls in flight and per minute, shared cool-downs) and
    ``prices`` a model to its ``Price``, all held in the store for every process on it (see
    ``docs/budgets.md``). ``completion_secret`` (at least 32 bytes, or a list whose first
    signs and all check, for rotation) signs the tokens a capability hands a third party to
    complete its parked step (``context.completion_token``, ``docs/external.md``).
    ``outbox_categories`` are the event categories a turn commits to the outbox (default all):
    ``{EventCategory.AUDIT, EventCategory.INTEGRATION}`` leaves ``trace`` events to the
    OpenTelemetry spans and the in-process sinks, and the relay fewer events to deliver.
    """

    def __init__(
        self,
        *,
        durability: Durability,
        model: ModelGateway | str | None = None,
        ports: Mapping[str, Any] | None = None,
        limits: KernelLimits | None = None,
        redact: Redactor | None = None,
        sinks: Sequence[EventSink] = (),
        clock: Clock | None = None,
        ids: IdFactory | None = None,
        tracer_provider: object | None = None,
        meter_provider: object | None = None,
        classify_error: ErrorClassifier | None = None,
        deps: object = None,
        budgets: Sequence[Budget] = (),
        provider_limits: Mapping[str, Limit] | None = None,
        prices: Mapping[str, Price] | None = None,
        completion_secret: bytes | str | Sequence[bytes | str] | None = None,
        outbox_categories: Iterable[EventCategory] = tuple(EventCategory),
    ) -> None:
        problems = []
        try:
            self.completion = CompletionTokens.configure(completion_secret)
        except ConfigurationError as exc:
            problems.append(exc.message)
        if not callable(getattr(durability, "with_turn", None)):
            problems.append("durability must implement Durability.with_turn")
        named = isinstance(model, str) and bool(model.strip())
        if model is not None and not named and not is_gateway(model):
            problems.append("model must implement ModelGateway.complete or be a model string")
        if ports is not None and not isinstance(ports, Mapping):
            problems.append("ports must be a mapping")
        if limits is not None and not isinstance(limits, KernelLimits):
            problems.append("limits must be KernelLimits")
        if redact is not None and not callable(redact):
            problems.append("redact must be callable")
        if any(not callable(getattr(s, "publish", None)) for s in sinks):
            problems.append("every sink must implement EventSink.publish")
        if clock is not None and not callable(clock):
            problems.append("clock must be callable")
        if ids is not None and not callable(ids):
            problems.append("ids must be callable")
        if classify_error is not None and not callable(classify_error):
            problems.append("classify_error must be callable")
        categories = _categories(outbox_categories)
        if categories is None:
            problems.append("outbox_categories must be EventCategory values")
        if problems:
            raise ConfigurationError("invalid kernel configuration", context={"problems": problems})
        assert categories is not None
        self.outbox_categories = categories
        self.budgets = tuple(budgets)
        self.provider_limits = check_limits(provider_limits or {})
        self.prices = check_prices(prices or {})
        self.flow_metrics = FlowMetrics(meter_provider)
        self._resolved: dict[str, ModelGateway] = {}
        self.durability = durability
        self.model: ModelGateway | None = self._resolve(model) if isinstance(model, str) else model
        self.model_name = model if isinstance(model, str) else None
        """The model string the kernel's model was built from, if it was given as one."""
        self.ports: Mapping[str, Any] = MappingProxyType(dict(ports or {}))
        self.limits = limits or KernelLimits()
        self.redact = redact
        self.sinks = tuple(sinks)
        self.clock: Clock = clock or _now
        self.ids: IdFactory = ids or new_id
        self.classify_error = classify_error
        self.deps = deps
        self.telemetry = Telemetry(
            tracer_provider=tracer_provider, meter_provider=meter_provider, redact=redact
        )

    def _resolve(self, model: str) -> ModelGateway:
        """One gateway per model string for this kernel (a ``ConfigurationError`` says what to
        install or set). Imported here so the kernel needs no provider SDK until one is named."""
        gateway = self._resolved.get(model)
        if gateway is None:
            from ..models._resolve import resolve_model

            gateway = self._resolved[model] = resolve_model(model)
        return gateway

    def compile(
        self,
        agent: AgentDefinition,
        *,
        compatible_with: Iterable[str] = (),
        migrations: Mapping[str, Migration] | None = None,
        provider_key: Callable[[EffectReceipt], str | None] | None = None,
    ) -> CompiledAgent:
        """Validate ``agent`` (``AgentCompilationError`` lists every problem) and bind it.

        The compiled agent keeps the definition as it is now: a capability registered on it
        afterwards (``agent.capability``) is not part of it until it is compiled again.

        Model strings in ``models`` are resolved here (``ConfigurationError`` when one cannot
        be). ``compatible_with`` names fingerprints of earlier definitions whose checkpoints this
        agent may continue as they are; ``migrations`` maps such a fingerprint to a function
        that rewrites the checkpoint first. Any other stored fingerprint is refused.
        ``provider_key(receipt)`` is the key the agent's capabilities sent the provider for a
        receipt (``None``: not known): the service's inspector shows it to operators.
        """
        routes: dict[str, ModelRoute | None] | None = None
        if isinstance(agent, AgentDefinition) and isinstance(agent.models, tuple):
            pairs = [p for p in agent.models if isinstance(p, tuple) and len(p) == 2]
            models = {str(task): choice for task, choice in pairs}
            agent_model = agent.model if isinstance(agent.model, str) else None
            routes = routes_for(models, self.model, agent_model or self.model_name, self._resolve)
        manifest, fingerprint = compile_manifest(agent, routes=routes)
        assert routes is not None  # a valid agent has them, all set
        agent = replace(agent)  # a snapshot: ``agent.capability`` later does not reach it
        catalog = Catalog(agent.capabilities)
        composition_schema = Composition.model_json_schema()
        catalog.remember(composition_schema)
        runtime = AgentRuntime(
            definition=agent,
            fingerprint=fingerprint,
            capabilities=MappingProxyType({c.id: c for c in agent.capabilities}),
            catalog=catalog,
            routes=MappingProxyType({k: v for k, v in routes.items() if v is not None}),
            ports=self.ports,
            limits=self.limits,
            composition_schema=composition_schema,
            facts=FactView(agent.facts),
            clock=self.clock,
            ids=self.ids,
            classify_error=self.classify_error,
            deps=self.deps,
            completion=self.completion,
            outbox_categories=self.outbox_categories,
            flow=build_gate(
                flow_counters(self.durability),
                agent_id=agent.id,
                budgets=(*self.budgets, *agent.budgets),
                limits=self.provider_limits,
                prices=self.prices,
                routes={k: v for k, v in routes.items() if v is not None},
                known_providers=known_providers(),
                metrics=self.flow_metrics,
            ),
        )
        compat = Compatibility(
            fingerprint=fingerprint,
            compatible_with=frozenset(compatible_with),
            migrations=MappingProxyType(dict(migrations or {})),
        )
        return CompiledAgent(
            runtime,
            manifest=manifest,
            compatibility=compat,
            durability=self.durability,
            redact=self.redact,
            sinks=self.sinks,
            telemetry=self.telemetry,
            provider_key=provider_key,
        )


def _categories(values: Iterable[EventCategory]) -> frozenset[EventCategory] | None:
    """The categories as a set, or ``None`` when one is not an ``EventCategory``."""
    if isinstance(values, str | bytes):
        return None
    try:
        found = frozenset(values)
    except TypeError:
        return None
    return found if all(isinstance(v, EventCategory) for v in found) else None
