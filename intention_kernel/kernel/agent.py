"""``define_agent``: a named, versioned set of capabilities with instructions and policies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .capability import Capability
from .policies import Policy

__all__ = ["AgentDefinition", "define_agent"]


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """A named, versioned set of capabilities with instructions and policies; inert data
    until ``kernel.compile`` judges it."""

    id: str
    version: str
    description: str
    capabilities: tuple[Capability, ...]
    instructions: str = ""
    model: str | None = None
    policies: tuple[Policy, ...] = ()


def define_agent(
    *,
    id: str,
    version: str,
    description: str,
    capabilities: Sequence[Capability],
    instructions: str = "",
    model: str | None = None,
    policies: Sequence[Policy] = (),
) -> AgentDefinition:
    """Record an agent; ``kernel.compile(agent)`` validates it."""
    return AgentDefinition(
        id=id,
        version=version,
        description=description,
        capabilities=tuple(capabilities),
        instructions=instructions,
        model=model,
        policies=tuple(policies),
    )
