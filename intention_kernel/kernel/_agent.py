"""``define_agent``: a named, versioned set of capabilities with instructions and policies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._capability import Capability
from ._policies import Policy
from ._routing import ModelChoice
from ._visibility import FactType

__all__ = ["AgentDefinition", "define_agent"]


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """A named, versioned set of capabilities with instructions and policies; inert data
    until ``kernel.compile`` judges it.

    ``models`` holds the per-task models as ``(task, model)`` pairs sorted by task
    (``dict(agent.models)`` reads them back); ``facts`` what a model may see of each fact type.
    """

    id: str
    version: str
    description: str
    capabilities: tuple[Capability, ...]
    instructions: str = ""
    model: str | None = None
    policies: tuple[Policy, ...] = ()
    models: tuple[tuple[str, ModelChoice], ...] = ()
    facts: tuple[FactType, ...] = ()
    deps_type: type[Any] | None = None
    """The class of the host's dependencies (``Kernel(deps=...)``, ``run(deps=...)``)."""


def define_agent(
    *,
    id: str,
    version: str,
    description: str,
    capabilities: Sequence[Capability],
    instructions: str = "",
    model: str | None = None,
    policies: Sequence[Policy] = (),
    models: Mapping[str, ModelChoice] | None = None,
    facts: Sequence[FactType] = (),
    deps_type: type[Any] | None = None,
) -> AgentDefinition:
    """Record an agent; ``kernel.compile(agent)`` validates it.

    ``model`` is passed to the kernel's gateway as the model to ask. ``models`` picks a model per
    task: ``{"interpret": ..., "compose": ..., "default": ...}``, each a ``ModelGateway`` or a
    model string (``"anthropic:claude-sonnet-4-5"``); the choices are part of the fingerprint.
    ``facts`` declares what a model may see of fact types (``define_fact``). ``deps_type`` is
    the class of the dependencies a turn runs with (``context.deps``, typed by
    ``CapabilityContext[Deps]``): a run whose deps are not an instance is refused
    (``INVALID_DEPS``). Not part of the fingerprint: deps are never stored.
    """
    chosen = sorted((models or {}).items(), key=lambda item: str(item[0]))
    return AgentDefinition(
        id=id,
        version=version,
        description=description,
        capabilities=tuple(capabilities),
        instructions=instructions,
        model=model,
        policies=tuple(policies),
        models=tuple(chosen),
        facts=tuple(facts),
        deps_type=deps_type,
    )
