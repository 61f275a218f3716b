"""What a capability's ``execute`` returns: one of five typed outcomes.

Why typed results instead of exceptions: a capability that needs more input, a missing fact or
the user's consent is not broken, and the kernel must turn each case into durable state
(an interaction, an agenda item) rather than an error. Exceptions still mean "crash": the turn
commits nothing and may be retried.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, JsonValue

from ._states import StepStatus

__all__ = [
    "AwaitingExternal",
    "CapabilityResult",
    "Completed",
    "Failed",
    "NeedsConfirmation",
    "NeedsDependency",
    "NeedsInput",
    "ProducedFact",
]


@dataclass(frozen=True, slots=True)
class ProducedFact:
    """A fact a completed step asserts. ``type`` is ``name@version`` and must be declared in
    the capability's ``provides``; ``key`` distinguishes several facts of one type (default:
    one fact per type, replaced with a new revision)."""

    type: str
    value: JsonValue
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Completed:
    """Success. ``output`` must match the output schema; ``text`` is canonical wording the
    kernel may show verbatim when the composed answer cannot be trusted; ``source`` names
    where the data came from (kept on the evidence record)."""

    output: BaseModel | dict[str, Any]
    facts: tuple[ProducedFact, ...] = ()
    text: str | None = None
    source: str | None = None
    artifacts: dict[str, JsonValue] = field(default_factory=dict)
    status: Literal[StepStatus.COMPLETED] = StepStatus.COMPLETED


@dataclass(frozen=True, slots=True)
class NeedsInput:
    """The step cannot run without more from the user (asked as an interaction)."""

    prompt: str
    fields: tuple[str, ...] = ()
    expires_after: float | timedelta | None = None
    """How long the question stays open (seconds or a ``timedelta``): at its deadline a turn
    closes it and drops the step, so a stale question does not wait forever."""
    status: Literal[StepStatus.NEEDS_INPUT] = StepStatus.NEEDS_INPUT


@dataclass(frozen=True, slots=True)
class NeedsDependency:
    """The step needs a fact (``name@version``) that does not exist yet."""

    fact: str
    reason: str = ""
    status: Literal[StepStatus.NEEDS_DEPENDENCY] = StepStatus.NEEDS_DEPENDENCY


@dataclass(frozen=True, slots=True)
class NeedsConfirmation:
    """The capability asks for consent itself (``confirmation="capability"``).

    ``accept`` names the offered options that give consent; every other option declines. A
    declined answer is handled by the kernel (the pending item is cancelled and the capability
    is not run again); only an accepting answer resumes the capability with ``context.answer``.
    ``accept`` must name at least one of ``options``.
    """

    prompt: str
    options: tuple[str, ...] = ("yes", "no")
    data: dict[str, JsonValue] = field(default_factory=dict)
    accept: tuple[str, ...] = ("yes",)
    expires_after: float | timedelta | None = None
    """How long an accepting answer counts (seconds or a ``timedelta``); a later one is
    answered ``INTERACTION_EXPIRED`` and the capability runs again to ask anew."""
    status: Literal[StepStatus.NEEDS_CONFIRMATION] = StepStatus.NEEDS_CONFIRMATION


@dataclass(frozen=True, slots=True)
class AwaitingExternal:
    """Park the step until the outside world completes it (a human review, a payment that
    settles, a batch job): the turn commits with it pending, and
    ``agent.complete_external(thread_id, key, result)`` resumes it in a new turn, running the
    capability again with ``context.external`` set. ``key`` names the completion (unique in
    the thread); after ``timeout`` (seconds or a ``timedelta``) a completion is refused and a
    turn tells the user the step expired. ``payload``: what the capability keeps for itself
    (``context.external.payload``); ``text``: what the user is told meanwhile."""

    key: str
    timeout: float | timedelta
    payload: dict[str, JsonValue] = field(default_factory=dict)
    text: str | None = None
    status: Literal[StepStatus.AWAITING_EXTERNAL] = StepStatus.AWAITING_EXTERNAL


@dataclass(frozen=True, slots=True)
class Failed:
    """A handled failure. ``reason`` is safe to show to the user."""

    reason: str
    retryable: bool = False
    status: Literal[StepStatus.FAILED] = StepStatus.FAILED


CapabilityResult = (
    Completed | NeedsInput | NeedsDependency | NeedsConfirmation | AwaitingExternal | Failed
)
"""Everything ``execute`` may return; anything else fails the step."""
