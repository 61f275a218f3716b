"""Planner policies: pure functions that allow, deny or demand consent for a planned step.

Why pure: a policy decision must be explainable and testable with a table; it sees the step and
the visible facts, never ports or the network.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..contracts.checkpoint import FactRecord
from ._states import Effect

__all__ = ["Policy", "PolicyDecision", "PolicyRequest", "allow", "deny", "require_confirmation"]


@dataclass(frozen=True, slots=True)
class PolicyRequest:
    """What a policy may judge: the planned step, the visible facts and the host context."""

    capability_id: str
    capability_version: str
    effect: Effect
    input: Mapping[str, Any]
    facts: Mapping[str, FactRecord]
    host_context: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """A policy's verdict; build it with ``allow()``, ``deny(reason)`` or
    ``require_confirmation(reason)``."""

    outcome: Literal["allow", "deny", "require_confirmation"]
    reason: str = ""


def allow() -> PolicyDecision:
    """Let the step run (the next policy may still object)."""
    return PolicyDecision("allow")


def deny(reason: str) -> PolicyDecision:
    """``reason`` is shown to the user: keep it safe."""
    return PolicyDecision("deny", reason)


def require_confirmation(reason: str = "") -> PolicyDecision:
    """Hold the step until the user confirms it in a later turn (``reason`` is shown)."""
    return PolicyDecision("require_confirmation", reason)


Policy = Callable[[PolicyRequest], PolicyDecision]
"""A pure function from a planned step to a decision; the first non-``allow`` one wins."""
