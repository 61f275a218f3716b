"""What a turn answers: ``Response`` (stored, replayed verbatim) and ``TurnResult``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..contracts.checkpoint import Evidence, Interaction, KernelCheckpoint
from .states import StepStatus

__all__ = ["Response", "StepSummary", "TurnResult"]


class StepSummary(BaseModel):
    """How one step ended. ``status`` (a ``StepStatus``): ``completed``, ``failed``,
    ``skipped``, ``uncertain`` (a write's outcome is unknown: being verified), ``applied`` (a
    write went through, but the step did not finish: no output; asking again replays it),
    ``needs_input``, ``needs_confirmation``, ``needs_dependency``; held steps
    ``awaiting_confirmation`` or ``waiting_for_fact``. Stored responses keep the plain string."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_id: str
    capability_id: str
    status: StepStatus
    reason: str | None = None


class Response(BaseModel):
    """The user-visible answer. ``kind`` says how it was made: a composed ``answer``, a
    ``clarification`` from the kernel, or a ``fallback`` built from capability text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    kind: Literal["answer", "clarification", "fallback"] = "answer"
    citations: list[str] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    steps: list[StepSummary] = Field(default_factory=list)
    interaction: Interaction | None = None


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What ``CompiledAgent.run`` returns: the answer, the committed checkpoint and the ids.

    ``replayed`` is true when the turn had already committed and its stored answer was
    returned without running anything (a retried delivery of the same turn id).
    """

    response: Response
    checkpoint: KernelCheckpoint
    thread_id: str
    turn_id: str
    trace_id: str
    replayed: bool
