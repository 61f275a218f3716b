"""Step outcomes from what a capability returned, and the reasons the kernel gives for them.

A capability's result becomes data the turn can commit: its output checked against the declared
schema, its facts, artifacts and confirmation details round-tripped through the codec now (a
value the codec refuses fails the step here, not the commit after a write), its words checked
as storable. A result that breaks its declaration fails the step with a reason in the kernel's
words.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, JsonValue, ValidationError

from ...contracts import codec
from ...contracts.checkpoint import Evidence
from ...contracts.errors import EffectUncertainError, KernelError, SerializationError
from ...contracts.receipts import EffectReceipt
from .. import consent
from .._context import CapabilityContext, uncertain_copy
from .._expiry import EXTERNAL_KEY, expiry_seconds, external_key
from .._facts import FactRef, parse_fact_ref
from .._limits import stored_within
from .._results import (
    AwaitingExternal,
    Completed,
    Failed,
    NeedsConfirmation,
    NeedsDependency,
    NeedsInput,
)
from .._states import EffectKind, StepStatus
from .state import PlannedStep, StepOutcome, TurnState

__all__ = ["APPLIED", "APPLIED_UNFINISHED", "NOT_APPLIED", "TOO_LONG", "UNCERTAIN"]

UNCERTAIN = (
    "the outcome is being verified. It may or may not have gone through, "
    "and I will not try it again until it has been checked"
)
NOT_APPLIED = "it did not go through and nothing was changed; you can ask me to try again"
TOO_LONG = "this took too long; please try again"
APPLIED = (
    "it went through, but I could not finish in time; "
    "ask again to see the result (it will not be done twice)"
)
"""The reason of an ``applied`` step: its write is ``completed`` in the ledger, but the step
itself did not finish (timed out, or its capability gave up waiting). Not ``failed`` (the user
must not retry or be told nothing happened), not ``completed`` (there is no output, no facts and
no evidence, and steps that depend on it must not run), not ``uncertain`` (the outcome is known;
nothing for an operator to verify). Asking again replays the stored value."""
APPLIED_UNFINISHED = (
    "it went through, but I could not finish; "
    "ask again to see the result (it will not be done twice)"
)
"""The reason of an ``applied`` step whose capability raised after its write completed."""
IN_STATE = stored_within(4)
"""Facts and confirmation details are stored in records of the turn result's checkpoint."""
IN_RESPONSE = stored_within(5)
"""Artifacts are stored in a step summary of the turn result's response."""


def _failed(step: PlannedStep, reason: str, **extra: Any) -> StepOutcome:
    return StepOutcome(step=step, status=StepStatus.FAILED, reason=reason, **extra)


def _uncertain(step: PlannedStep, receipts: list[EffectReceipt]) -> StepOutcome:
    return StepOutcome(step=step, status=StepStatus.UNCERTAIN, reason=UNCERTAIN, receipts=receipts)


def _with_receipt(receipts: list[EffectReceipt], exc: EffectUncertainError) -> list[EffectReceipt]:
    """The step's receipts plus the ledger's receipt the error carries, when the step's own
    ``run_effect`` did not record it (the error came from elsewhere in the capability)."""
    if exc.receipt is None or any(
        r.idempotency_key == exc.receipt.idempotency_key for r in receipts
    ):
        return receipts
    return [*receipts, uncertain_copy(exc.receipt)]


def _completed(
    state: TurnState, step: PlannedStep, result: Completed, context: CapabilityContext
) -> StepOutcome:
    cap = step.capability
    output = result.output
    try:
        if not isinstance(output, cap.output_schema):
            dumped = output.model_dump() if isinstance(output, BaseModel) else output
            output = cap.output_schema.model_validate(dumped)
        # Stored forms, checked by the codec now: the turn must be able to commit them.
        output_json: JsonValue = codec.round_trip(
            output.model_dump(mode="json"), what=f"output of {cap.id}"
        )
        facts: list[tuple[FactRef, str | None, JsonValue]] = []
        for produced in result.facts:
            ref = parse_fact_ref(produced.type)
            if ref is None or produced.type not in cap.provides:
                return _failed(step, "the capability produced a fact it does not declare")
            facts.append(
                (
                    ref,
                    produced.key,
                    codec.round_trip(produced.value, limits=IN_STATE, what=f"fact {ref}"),
                )
            )
    except (ValidationError, KernelError, ValueError, TypeError, RecursionError):
        return _failed(step, "the capability's output did not match its declared schema")
    try:
        artifacts = codec.round_trip(
            dict(result.artifacts), limits=IN_RESPONSE, what=f"artifacts of {cap.id}"
        )
    except (KernelError, ValueError, TypeError, RecursionError):
        return _failed(step, "the capability's artifacts cannot be stored")
    receipts = context.receipts
    if cap.effect == EffectKind.WRITE and not receipts:
        return _failed(step, "a write completed without going through run_effect")
    evidence = Evidence(
        id=state.runtime.ids("ev"),
        capability_id=cap.id,
        turn_id=state.turn.turn_id,
        step_id=step.step_id,
        receipt_id=receipts[0].id if receipts else None,
        source=result.source,
    )
    return StepOutcome(
        step=step,
        status=StepStatus.COMPLETED,
        output=output_json,
        facts=facts,
        evidence=evidence,
        text=result.text,
        receipts=receipts,
        artifacts=artifacts if isinstance(artifacts, dict) else {},
    )


def _outcome(
    state: TurnState, step: PlannedStep, result: object, context: CapabilityContext
) -> StepOutcome:
    if isinstance(result, Completed):
        return _completed(state, step, result, context)
    if isinstance(result, NeedsInput):
        try:
            asked_for = expiry_seconds(result.expires_after)
        except ValueError:
            return _failed(step, "the capability's question has an invalid expires_after")
        return StepOutcome(
            step=step,
            status=StepStatus.NEEDS_INPUT,
            prompt=result.prompt,
            missing=result.fields,
            expires_after=asked_for,
            receipts=context.receipts,
        )
    if isinstance(result, NeedsDependency):
        return StepOutcome(
            step=step,
            status=StepStatus.NEEDS_DEPENDENCY,
            missing=(result.fact,),
            reason=result.reason or None,
            receipts=context.receipts,
        )
    if isinstance(result, NeedsConfirmation):
        try:
            data = codec.round_trip(
                dict(result.data),
                limits=IN_STATE,
                what=f"confirmation details of {step.capability.id}",
            )
        except (KernelError, ValueError, TypeError):
            return _failed(step, "the capability's confirmation details are not storable")
        options = tuple(result.options)
        accept = tuple(dict.fromkeys(result.accept))
        if not accept or any(a not in options for a in accept):
            # Which answers consent must be known before asking: a decline is the kernel's.
            return _failed(step, "the capability's confirmation names no valid accepting option")
        if not isinstance(result.prompt, str):
            return _failed(step, "the capability returned text that cannot be stored")
        try:
            expires_after = expiry_seconds(result.expires_after)
        except ValueError:
            return _failed(step, "the capability's confirmation has an invalid expires_after")
        first = step.capability.consent_fields
        question = consent.question(result.prompt, step.input_json, first=first, kernel=False)
        if question is None:
            return _failed(step, "the operation has more details than one question can show")
        return StepOutcome(
            step=step,
            status=StepStatus.NEEDS_CONFIRMATION,
            prompt=question,
            options=options,
            accept=accept,
            expires_after=expires_after,
            data=data if isinstance(data, dict) else {},
            receipts=context.receipts,
        )
    if isinstance(result, AwaitingExternal):
        return _parked(step, result, context)
    if isinstance(result, Failed):
        return _failed(step, result.reason, receipts=context.receipts)
    return _failed(step, "the capability returned an unknown result")


_BAD_WAIT = "the capability's external wait has an invalid key, timeout or payload"


def _parked(step: PlannedStep, result: AwaitingExternal, context: CapabilityContext) -> StepOutcome:
    """``AwaitingExternal``: the step waits for ``complete_external`` (``_pipeline.external``)."""
    try:
        key = external_key(result.key)
        timeout = expiry_seconds(result.timeout)
        payload = codec.round_trip(
            dict(result.payload), limits=IN_STATE, what=f"external payload of {step.capability.id}"
        )
    except (KernelError, ValueError, TypeError, RecursionError):
        return _failed(step, _BAD_WAIT)
    if timeout is None:
        return _failed(step, _BAD_WAIT)
    return StepOutcome(
        step=step,
        status=StepStatus.AWAITING_EXTERNAL,
        text=result.text,
        expires_after=timeout,
        data={
            EXTERNAL_KEY: key,
            "payload": payload,
            # A write that ran with the user's consent resumes with it (its key replays).
            "approval": None if step.approval is None else step.approval.to_json(),
        },
        receipts=context.receipts,
    )


def _storable(outcome: StepOutcome) -> StepOutcome:
    """The capability's words are committed with the turn (answer, agenda, interaction): a
    value the codec refuses fails the step now instead of the commit after a write."""
    source = None if outcome.evidence is None else outcome.evidence.source
    words = [
        outcome.text,
        outcome.reason,
        outcome.prompt,
        source,
        *outcome.options,
        *outcome.accept,
    ]
    try:
        codec.check([*words, *outcome.missing], what=f"result of {outcome.step.capability.id}")
    except SerializationError:
        return _failed(
            outcome.step,
            "the capability returned text that cannot be stored",
            receipts=outcome.receipts,
        )
    return outcome
