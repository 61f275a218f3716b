"""The kernel's named states: how a step ended, why a step is held, what a capability does to
the outside world and who asks for consent.

Why ``StrEnum``: each member *is* its string value. Checkpoints, stored responses and agent
manifests written before these names existed parse unchanged and serialize byte for byte as
before (so agent fingerprints do not move), and host code that compares with plain strings
keeps working.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

__all__ = [
    "Confirmation",
    "ConfirmationMode",
    "Effect",
    "EffectKind",
    "HoldReason",
    "ModelVisibility",
    "StepStatus",
]


class StepStatus(StrEnum):
    """How one step of a turn ended (``StepSummary.status``), or why it did not run."""

    COMPLETED = "completed"
    """The capability returned ``Completed``; its output, facts and evidence are kept."""
    FAILED = "failed"
    """A handled failure (``Failed``, a schema mismatch, a timeout); the reason is safe to show."""
    SKIPPED = "skipped"
    """A step it depended on did not complete, so it never ran."""
    UNCERTAIN = "uncertain"
    """A write's outcome is unknown: being verified, never retried until an operator decides."""
    APPLIED = "applied"
    """A write went through but its step did not finish: no output; asking again replays it."""
    NEEDS_INPUT = "needs_input"
    """The capability asked the user for more (``NeedsInput``)."""
    NEEDS_CONFIRMATION = "needs_confirmation"
    """The capability asked for consent itself (``NeedsConfirmation``)."""
    NEEDS_DEPENDENCY = "needs_dependency"
    """The capability needs a fact that does not exist yet (``NeedsDependency``)."""
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    """Held by the kernel: the user must confirm first (see ``HoldReason``)."""
    AWAITING_EXTERNAL = "awaiting_external"
    """The capability parked it (``AwaitingExternal``): the outside world completes it later."""
    WAITING_FOR_FACT = "waiting_for_fact"
    """Held by the kernel: a fact it requires is missing (see ``HoldReason``)."""


class HoldReason(StrEnum):
    """Why the planner held a valid step instead of running it this turn."""

    AWAITING_CONFIRMATION = "awaiting_confirmation"
    """A write with ``confirmation="required"`` (or a policy asked for consent)."""
    WAITING_FOR_FACT = "waiting_for_fact"
    """A required fact is missing, or the step waits for one that is (or for a cycle)."""


class EffectKind(StrEnum):
    """What a capability does to the outside world; only ``write`` may call ``run_effect``."""

    NONE = "none"
    """Pure computation on the visible facts and input."""
    READ = "read"
    """Reads through the host's ports; safe to run again."""
    WRITE = "write"
    """Changes the outside world, once per business key, and only with consent."""


class ConfirmationMode(StrEnum):
    """Who asks the user for consent before a write runs."""

    NONE = "none"
    """Nobody: only for ``none`` and ``read`` capabilities."""
    REQUIRED = "required"
    """The kernel: the step is held and runs only in a later turn that accepts it."""
    CAPABILITY = "capability"
    """The capability itself, by returning ``NeedsConfirmation``."""


class ModelVisibility(StrEnum):
    """What the model may see of a fact type (``define_fact``); capabilities always see all."""

    FULL = "full"
    """The value, with the fact type's redacted paths replaced."""
    PRESENCE = "presence"
    """That the fact exists (id, type, revision), never its value."""
    HIDDEN = "hidden"
    """Nothing: the fact is left out of what the model is shown."""


Effect = EffectKind | Literal["none", "read", "write"]
"""An effect as a definition may spell it: the member or its string value."""
Confirmation = ConfirmationMode | Literal["none", "required", "capability"]
"""A confirmation mode as a definition may spell it: the member or its string value."""
