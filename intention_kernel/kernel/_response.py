"""What a turn answers: ``Response`` (stored, replayed verbatim) and ``TurnResult``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from ..contracts.checkpoint import Evidence, Interaction, KernelCheckpoint
from ._states import StepStatus

__all__ = ["Response", "StepSummary", "TurnResult", "TurnUsage"]


class StepSummary(BaseModel):
    """How one step ended. ``status`` (a ``StepStatus``): ``completed``, ``failed``,
    ``skipped``, ``uncertain`` (a write's outcome is unknown: being verified), ``applied`` (a
    write went through, but the step did not finish: no output; asking again replays it),
    ``needs_input``, ``needs_confirmation``, ``needs_dependency``; held steps
    ``awaiting_confirmation`` or ``waiting_for_fact``. Stored responses keep the plain string.
    ``artifacts`` are what a completed step returned for the host (``Completed.artifacts``);
    the model never sees them. ``retryable`` is set on a ``failed`` step that ended by an
    exception or its timeout: whether asking again may help (``None`` for a failure the
    capability returned itself)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_id: str
    capability_id: str
    status: StepStatus
    reason: str | None = None
    artifacts: dict[str, JsonValue] = Field(default_factory=dict)
    retryable: bool | None = None

    @model_serializer(mode="wrap")
    def _without_empty_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A step without artifacts or ``retryable`` is stored exactly as before they existed."""
        data = handler(self)
        if isinstance(data, dict):
            if not self.artifacts:
                data.pop("artifacts", None)
            if self.retryable is None:
                data.pop("retryable", None)
        return data


class Response(BaseModel):
    """The user-visible answer. ``kind`` says how it was made: a composed ``answer``, a
    ``clarification`` from the kernel, a ``fallback`` built from capability text, or
    ``budget_exceeded``: a model budget ran out, the kernel said so (and what had run)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    kind: Literal["answer", "clarification", "fallback", "budget_exceeded"] = "answer"
    citations: list[str] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    steps: list[StepSummary] = Field(default_factory=list)
    interaction: Interaction | None = None


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """What one ``run`` cost in model calls and tokens, as the providers reported them.

    Counts every model call the run made, also those of an attempt that did not commit (the
    tokens were spent). A replayed turn makes no model call: all zero.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What ``CompiledAgent.run`` returns: the answer, the committed checkpoint and the ids.

    ``replayed`` is true when the turn had already committed and its stored answer was
    returned without running anything (a retried delivery of the same turn id). ``usage`` is
    what this run cost in model tokens.
    """

    response: Response
    checkpoint: KernelCheckpoint
    thread_id: str
    turn_id: str
    trace_id: str
    replayed: bool
    usage: TurnUsage = TurnUsage()
