"""``Kernel``: the host's wiring (durability, model gateway, ports, limits, redactor, sinks).

``kernel.compile(agent)`` validates the definition, fingerprints its manifest and returns a
``CompiledAgent`` that runs turns with this wiring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from pydantic import JsonValue

from ..contracts.durability import Durability
from ..contracts.errors import ConfigurationError
from ..contracts.gateway import ModelGateway
from ..contracts.sinks import EventSink
from .agent import AgentDefinition
from .compat import Compatibility, Migration
from .compile import compile_manifest
from .events import Redactor
from .limits import KernelLimits
from .pipeline import AgentRuntime
from .pipeline.state import Composition, Interpretation
from .runtime import CompiledAgent

__all__ = ["Kernel"]


def _catalog(agent: AgentDefinition) -> list[JsonValue]:
    """What the interpreting model is told about each capability."""
    return [
        {
            "id": c.id,
            "version": c.version,
            "description": c.description,
            "effect": str(c.effect),
            "input_schema": c.input_schema.model_json_schema(),
            "output_schema": c.output_schema.model_json_schema(),
            "requires": list(c.requires),
            "provides": list(c.provides),
            "guidance": c.guidance.to_json(),
        }
        for c in agent.capabilities
    ]


class Kernel:
    """The host's wiring: one durability adapter, one model gateway, the ports capabilities
    may use, limits, an event redactor and in-process event sinks.

    Construction checks the wiring at once (``ConfigurationError`` lists every problem);
    ``compile(agent)`` then binds an agent definition to it. One kernel serves many agents.
    """

    def __init__(
        self,
        *,
        durability: Durability,
        model: ModelGateway,
        ports: Mapping[str, Any] | None = None,
        limits: KernelLimits | None = None,
        redact: Redactor | None = None,
        sinks: Sequence[EventSink] = (),
    ) -> None:
        problems = []
        if not callable(getattr(durability, "with_turn", None)):
            problems.append("durability must implement Durability.with_turn")
        if not callable(getattr(model, "complete", None)):
            problems.append("model must implement ModelGateway.complete")
        if ports is not None and not isinstance(ports, Mapping):
            problems.append("ports must be a mapping")
        if limits is not None and not isinstance(limits, KernelLimits):
            problems.append("limits must be KernelLimits")
        if redact is not None and not callable(redact):
            problems.append("redact must be callable")
        if any(not callable(getattr(s, "publish", None)) for s in sinks):
            problems.append("every sink must implement EventSink.publish")
        if problems:
            raise ConfigurationError("invalid kernel configuration", context={"problems": problems})
        self.durability = durability
        self.model = model
        self.ports: Mapping[str, Any] = MappingProxyType(dict(ports or {}))
        self.limits = limits or KernelLimits()
        self.redact = redact
        self.sinks = tuple(sinks)

    def compile(
        self,
        agent: AgentDefinition,
        *,
        compatible_with: Iterable[str] = (),
        migrations: Mapping[str, Migration] | None = None,
    ) -> CompiledAgent:
        """Validate ``agent`` (``AgentCompilationError`` lists every problem) and bind it.

        ``compatible_with`` names fingerprints of earlier definitions whose checkpoints this
        agent may continue as they are; ``migrations`` maps such a fingerprint to a function
        that rewrites the checkpoint first. Any other stored fingerprint is refused.
        """
        manifest, fingerprint = compile_manifest(agent)
        runtime = AgentRuntime(
            definition=agent,
            fingerprint=fingerprint,
            capabilities=MappingProxyType({c.id: c for c in agent.capabilities}),
            catalog=_catalog(agent),
            gateway=self.model,
            ports=self.ports,
            limits=self.limits,
            interpretation_schema=Interpretation.model_json_schema(),
            composition_schema=Composition.model_json_schema(),
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
        )
