"""What a turn answers: ``Response`` (stored, replayed verbatim) and ``TurnResult``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..contracts.checkpoint import Evidence, Interaction, KernelCheckpoint

__all__ = ["Response", "StepSummary", "TurnResult"]


class StepSummary(BaseModel):
    """How one step ended. ``status``: ``completed``, ``failed``, ``skipped``, ``uncertain`` (a
    write's outcome is unknown: being verified), ``applied`` (a write went through, but the step
    did not finish: no output; asking again replays it), ``needs_input``,
    ``needs_confirmation``, ``needs_dependency``; held steps ``awaiting_confirmation`` or
    ``waiting_for_fact``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_id: str
    capability_id: str
    status: str
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
    response: Response
    checkpoint: KernelCheckpoint
    thread_id: str
    turn_id: str
    trace_id: str
    replayed: bool
