"""Stage: response composition. The model words the answer; the kernel checks its citations.

Every evidence id the model cites must exist (this turn's evidence or that of a visible fact).
An answer that cites unknown ids, or is malformed, gets one recomposition; after that the kernel
falls back to a safe answer built from the capabilities' canonical text, at once when the
provider declines to compose (a refusal or a content filter is not asked again). A turn that
only needs a clarification is answered by the kernel without a model call, and so is a turn
whose write has an unknown outcome ("being verified": a model must never word it as done),
whose write went through although its step did not finish (``applied``: a model must never
word it as failed), whose step ended by an exception or its timeout (the kernel's reason says
what the user may do) or that only resolved pending work (cancelled, asked again). Updates about
earlier work (a write reconciled since the last turn) come first, in the kernel's words,
whatever the answer's kind.

A ``stream`` consumer is shown the question the answer asks (``ConfirmationHeld``) and the
answer's text while the model writes it (``TextDelta``, from a gateway that streams); once the
answer is settled, what it was shown is corrected to exactly the final text.
"""

from __future__ import annotations

from typing import Literal

from pydantic import JsonValue, ValidationError

from ...contracts import codec
from ...contracts.checkpoint import Evidence, Interaction
from ...contracts.errors import FlowControlError, SerializationError
from ...contracts.events import EventCategory
from .._response import Response, StepSummary
from .._states import StepStatus
from ..streaming import ConfirmationHeld
from ._model import ask
from .budget import budget_line, spent, stop
from .state import Composition, StepOutcome, TurnState

__all__ = ["compose", "fallback_text", "outcome_json"]

_STATUS_TEXT = {
    StepStatus.FAILED: "I could not complete that: {reason}",
    StepStatus.SKIPPED: "I could not complete that because an earlier step did not finish.",
    StepStatus.NEEDS_DEPENDENCY: "I need more information before I can do that.",
    StepStatus.UNCERTAIN: "{description}: {reason}.",
    StepStatus.APPLIED: "{description}: {reason}.",
    StepStatus.AWAITING_EXTERNAL: "{description}: under way. I will tell you when it is done.",
}
_KERNEL_WORDED = (StepStatus.UNCERTAIN, StepStatus.APPLIED, StepStatus.AWAITING_EXTERNAL)
"""Step statuses only the kernel words: a write in doubt, or done although its step was not."""


def _kernel_worded(outcome: StepOutcome) -> bool:
    """A write in doubt, one done although its step was not, or a step that ended by an
    exception or its timeout (the kernel's reason is the whole truth the user gets)."""
    return outcome.status in _KERNEL_WORDED or (
        outcome.status is StepStatus.FAILED and outcome.error is not None
    )


def _summaries(state: TurnState) -> list[StepSummary]:
    assert state.reduction is not None
    steps = [
        StepSummary(
            step_id=o.step.step_id,
            capability_id=o.step.capability.id,
            status=o.status,
            reason=o.reason,
            artifacts=o.artifacts,
            retryable=(
                o.error.retryable if o.error is not None and o.status is StepStatus.FAILED else None
            ),
        )
        for o in state.outcomes
    ]
    steps.extend(
        StepSummary(
            step_id=h.step.step_id,
            capability_id=h.step.capability.id,
            status=StepStatus(h.status),
            reason=h.reason,
        )
        for h in state.reduction.held
    )
    return steps


def outcome_json(outcome: StepOutcome) -> dict[str, JsonValue]:
    """What a model is shown of a step's outcome (compose, and a further round)."""
    return {
        "step_id": outcome.step.step_id,
        "capability_id": outcome.step.capability.id,
        "status": str(outcome.status),
        "output": outcome.output,
        "text": outcome.text,
        "reason": outcome.reason,
        "prompt": outcome.prompt,
        "evidence_id": None if outcome.evidence is None else outcome.evidence.id,
    }


def fallback_text(state: TurnState) -> str:
    """A safe answer from canonical capability text, reasons and clarifications only."""
    assert state.plan is not None
    parts: list[str] = []
    for outcome in state.outcomes:
        if outcome.status == StepStatus.COMPLETED:
            parts.append(outcome.text or f"Done: {outcome.step.capability.description}")
        elif outcome.status == StepStatus.AWAITING_EXTERNAL and outcome.text:
            parts.append(outcome.text)
        elif outcome.prompt:
            parts.append(outcome.prompt)
        elif outcome.status in _STATUS_TEXT:
            parts.append(
                _STATUS_TEXT[outcome.status].format(
                    reason=outcome.reason or "",
                    description=outcome.step.capability.description.rstrip("."),
                )
            )
    parts.extend(state.plan.notes)
    parts.extend(state.plan.clarifications)
    shown = _shown_interaction(state)
    if shown is not None:
        parts.append(shown.prompt)
    return "\n".join(p for p in parts if p) or "I am not sure how to help with that."


def _in_kernel_words(
    state: TurnState,
    evidence: list[Evidence],
    steps: list[StepSummary],
    interaction: Interaction | None,
) -> Response:
    """The answer from the capabilities' canonical text and the kernel's lines, no model's:
    a ``fallback``, or ``budget_exceeded`` when a budget ran out (``budget``), then with why
    the turn stopped."""
    assert state.plan is not None
    kind: Literal["fallback", "budget_exceeded"] = "fallback"
    if state.stopped is not None:
        kind = "budget_exceeded"
        state.plan.notes.append(budget_line(state.stopped))
        state.plan.clarifications.clear()  # a clarification cannot be acted on until then
    return Response(
        text=fallback_text(state),
        kind=kind,
        evidence=evidence,
        citations=[e.id for e in evidence],
        steps=steps,
        interaction=interaction,
    )


def _shown_interaction(state: TurnState) -> Interaction | None:
    """The interaction this answer asks: a new one, or the pending one shown again."""
    plan, reduction = state.plan, state.reduction
    if reduction is None or plan is None:
        return None
    if reduction.new_interaction is not None:
        return reduction.new_interaction
    return reduction.interaction if plan.resurface else None


def _with_lines(text: str, lines: list[str]) -> str:
    missing = [line for line in lines if line and line not in text]
    return "\n".join([text, *missing]) if missing else text


def _check(output: JsonValue, known: set[str]) -> tuple[Composition | None, list[JsonValue]]:
    try:
        composition = Composition.model_validate(output)
    except ValidationError:
        return None, ["the answer must be an object with 'text' and 'citations'"]
    if not composition.text.strip():
        return None, ["the answer text is empty"]
    try:
        codec.check(composition.text, what="the answer text")
    except SerializationError as exc:
        return None, [exc.message]
    unknown = [c for c in composition.citations if c not in known]
    if unknown:
        return None, [f"unknown evidence id: {c}" for c in unknown[:10]]
    return composition, []


async def compose(state: TurnState) -> None:
    plan, reduction = state.plan, state.reduction
    assert plan is not None and reduction is not None
    evidence = list(reduction.evidence)
    interaction = _shown_interaction(state)
    steps = _summaries(state)
    progress = state.progress
    if progress is not None and interaction is not None:
        progress.emit(
            ConfirmationHeld(
                interaction.id, interaction.kind, interaction.prompt, tuple(interaction.options)
            )
        )
    if state.stopped is not None:
        state.response = _in_kernel_words(state, evidence, steps, interaction)
    elif not state.outcomes and plan.clarifications and interaction is None and not plan.notes:
        state.response = Response(
            text="\n".join(plan.clarifications), kind="clarification", steps=steps
        )
    elif (not state.outcomes and plan.notes) or any(_kernel_worded(o) for o in state.outcomes):
        # Kernel words only: resumed work was cancelled or re-asked, a write's outcome is
        # unknown ("being verified", never worded as done), a write went through although
        # its step did not finish ("applied", never worded as failed), or a step raised.
        state.response = _in_kernel_words(state, evidence, steps, interaction)
    else:
        known = {e.id for e in evidence}
        known.update(e.id for f in reduction.facts for e in f.evidence)
        payload: dict[str, JsonValue] = {
            "text": state.turn.text,
            "reply": None if state.interpretation is None else state.interpretation.reply,
            "outcomes": [outcome_json(o) for o in state.outcomes],
            "clarifications": list(plan.clarifications),
            "notes": list(plan.notes),
            "updates": list[JsonValue](state.updates),
            "interaction": None if interaction is None else interaction.prompt,
            "context": state.projection,
        }
        composition: Composition | None = None
        for _attempt in range(2):
            if progress is not None:
                progress.compose_started()  # a recomposition replaces what was shown
            try:
                reply = await ask(
                    state,
                    "compose",
                    payload,
                    state.runtime.composition_schema,
                    on_delta=None if progress is None else progress.model_delta,
                )
            except FlowControlError as exc:
                if not spent(exc):
                    raise
                stop(state, exc)
                break
            if reply.refusal is not None:
                break  # declined: asking again gets the same answer; the kernel words it
            composition, problems = _check(reply.output, known)
            if composition is not None:
                break
            payload = {**payload, "problems": problems}
        if composition is None:  # declined, malformed twice, or the budget ran out
            state.response = _in_kernel_words(state, evidence, steps, interaction)
        else:
            text = _with_lines(composition.text, list(plan.notes))
            if interaction is not None and interaction.prompt not in text:
                text = f"{text}\n{interaction.prompt}"
            state.response = Response(
                text=text,
                kind="answer",
                citations=list(dict.fromkeys(composition.citations)),
                evidence=evidence,
                steps=steps,
                interaction=interaction,
            )
    if state.updates:
        # News about earlier work (a reconciled write) is always said, in the kernel's words.
        # First: it is news about earlier work, before this turn's answer or question.
        news = [u for u in state.updates if u not in state.response.text]
        text = "\n".join([*news, state.response.text])
        state.response = state.response.model_copy(update={"text": text})
    if progress is not None:
        progress.settle(state.response.text)
    state.recorder.emit(
        "response.composed",
        {
            "kind": state.response.kind,
            "text": state.response.text,
            "citations": list(state.response.citations),
        },
        cause=state.plan_event or state.start_event,
        category=EventCategory.INTEGRATION,
    )
