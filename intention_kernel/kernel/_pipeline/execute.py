"""Stage: execution. Runs the planned steps: independent ones concurrently, dependents after.

Each step is a task in one task group. A step waits for the steps it depends on, then runs its
capability with a fresh ``CapabilityContext`` (ports, visible facts including those produced
earlier in this turn, turn info, execution ids, deadline, its own event branch, and
``run_effect`` for writes). Handled outcomes become data, and so does an exception from a
capability: the step fails with a reason in the kernel's words and a ``retryable`` flag
(``failures``; a typed refusal of the ledger such as ``EFFECT_REQUEST_MISMATCH`` included), its
event names the exception's type, never its message, and the turn commits. Only errors of the
turn itself leave it uncommitted: the store (``DurabilityError``), the turn's deadline, a
cancellation.

A step that stopped while a write was under way (its deadline, or a capability that caught a
timeout or error from ``run_effect`` itself) is answered from the ledger, not from what the
capability said: the kernel reads the current receipts of the interrupted keys
(``TurnScope.receipts``). ``uncertain`` or ``prepared`` -> the step is ``uncertain`` ("being
verified"); ``completed`` -> ``applied`` ("it went through, but I could not finish in time");
``failed`` or none (stopped before the provider was called) -> a plain failure. A step that
raised after a write of it completed is ``applied`` the same way: never reported as failed.
"""

from __future__ import annotations

import asyncio
import logging
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, JsonValue, ValidationError

from ...contracts import codec
from ...contracts.checkpoint import Evidence, FactRecord
from ...contracts.errors import (
    EffectNotAppliedError,
    EffectUncertainError,
    KernelError,
    SerializationError,
)
from ...contracts.events import EventCategory
from ...contracts.receipts import EffectReceipt, ReceiptStatus
from ...telemetry import step_span
from .. import consent
from .._context import CapabilityContext, StepEvents, uncertain_copy
from .._facts import FactRef, apply_fact, parse_fact_ref
from .._failures import StepError, classify, must_propagate, reason_for, type_name
from .._limits import stored_within
from .._results import Completed, Failed, NeedsConfirmation, NeedsDependency, NeedsInput
from .._states import EffectKind, StepStatus
from .state import PlannedStep, StepOutcome, TurnState

__all__ = ["APPLIED", "APPLIED_UNFINISHED", "NOT_APPLIED", "TOO_LONG", "UNCERTAIN", "execute"]

logger = logging.getLogger("intention_kernel.kernel")

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
INTERRUPTED = "interrupted before its outcome was recorded"
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
        return StepOutcome(
            step=step,
            status=StepStatus.NEEDS_INPUT,
            prompt=result.prompt,
            missing=result.fields,
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
            data=data if isinstance(data, dict) else {},
            receipts=context.receipts,
        )
    if isinstance(result, Failed):
        return _failed(step, result.reason, receipts=context.receipts)
    return _failed(step, "the capability returned an unknown result")


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


def _visible(
    base: dict[str, FactRecord], step: PlannedStep, done: dict[str, StepOutcome], turn_id: str
) -> tuple[dict[str, FactRecord], tuple[str, ...]]:
    """Checkpoint facts plus those produced by the steps this one waited for."""
    if not step.after:
        return base, ()
    visible = dict(base)
    for dep in step.after:
        outcome = done[dep]
        if outcome.evidence is None:
            continue
        for ref, key, value in outcome.facts:
            apply_fact(visible, ref, key, value, outcome.evidence, (), turn_id)
    used = tuple(
        fid for fid, f in visible.items() if f"{f.type}@{f.version}" in step.capability.requires
    )
    return visible, used


async def _run_step(
    state: TurnState,
    step: PlannedStep,
    done: dict[str, StepOutcome],
    finished: dict[str, asyncio.Event],
) -> None:
    try:
        for dep in step.after:
            await finished[dep].wait()
        blocked = [d for d in step.after if done[d].status != StepStatus.COMPLETED]
        if blocked:
            outcome = StepOutcome(
                step=step,
                status=StepStatus.SKIPPED,
                reason="a step it depends on did not complete",
            )
            outcome.event = state.recorder.emit(
                "step.skipped",
                {"capability_id": step.capability.id, "blocked_by": list[JsonValue](blocked)},
                cause=state.plan_event,
                step_id=step.step_id,
                category=EventCategory.AUDIT,
            )
            done[step.step_id] = outcome
            return
        done[step.step_id] = await _call(state, step, done)
    finally:
        finished[step.step_id].set()


async def _call(state: TurnState, step: PlannedStep, done: dict[str, StepOutcome]) -> StepOutcome:
    cap = step.capability
    recorder = state.recorder
    started = recorder.emit(
        "step.started",
        {"capability_id": cap.id, "capability_version": cap.version, "input": step.input_json},
        cause=state.plan_event,
        step_id=step.step_id,
    )
    visible, used = _visible(state.facts, step, done, state.turn.turn_id)
    if not used:
        used = tuple(fid for fid, f in visible.items() if f"{f.type}@{f.version}" in cap.requires)
    loop = asyncio.get_running_loop()
    deadline = min(state.deadline, loop.time() + state.runtime.limits.step_timeout)
    context = CapabilityContext(
        scope=state.scope,
        capability_id=cap.id,
        effect=cap.effect,
        step_id=step.step_id,
        execution_id=state.runtime.ids("exec"),
        turn=state.turn,
        ports=state.runtime.ports,
        facts=MappingProxyType(visible),
        host_context=state.host_context,
        events=StepEvents(recorder, started, step.step_id),
        deadline=deadline,
        confirmation=cap.confirmation,
        approval=step.approval,
        answer=step.answer,
        request=step.input_json,
    )
    unfinished: str | None = None  # set when the step stopped: its ``applied`` reason
    task = asyncio.current_task()
    cancels = 0 if task is None else task.cancelling()
    classify_error = state.runtime.classify_error
    limit = asyncio.timeout_at(deadline)
    # The ik.step span is current while the capability runs: its effects nest in it.
    with step_span(cap.id, cap.version, step.step_id, str(cap.effect)) as traced:
        try:
            async with limit:
                result = await cap.execute(context, step.input)
        except TimeoutError as exc:
            unfinished = APPLIED
            outcome = _failed(
                step,
                TOO_LONG,
                receipts=context.receipts,
                error=StepError(retryable=True),
                error_type=type_name(exc),
            )
        except EffectUncertainError as exc:
            # The receipt is durable in the ledger: the turn commits an honest "being verified".
            outcome = _uncertain(step, _with_receipt(context.receipts, exc))
        except EffectNotAppliedError:
            outcome = _failed(step, NOT_APPLIED, receipts=context.receipts)
        except Exception as exc:
            pending = task is not None and task.cancelling() > cancels
            if must_propagate(exc, cancel_pending=pending):
                raise  # the store, the turn's deadline or a cancellation: the turn's own error
            # A backend down, a bug, a write the ledger refused: this step failed, not the turn.
            timed_out = limit.expired()  # the capability turned its step timeout into another
            error = StepError(retryable=True) if timed_out else classify(exc, classify_error)
            _log_failure(state, step, exc, error)
            traced.raised(exc)
            unfinished = APPLIED if timed_out else APPLIED_UNFINISHED
            outcome = _failed(
                step,
                TOO_LONG if timed_out else reason_for(exc, error),
                receipts=context.receipts,
                error=error,
                error_type=type_name(exc),
            )
        else:
            outcome = _storable(_outcome(state, step, result, context))
            if any(r.status is ReceiptStatus.UNCERTAIN for r in context.receipts):
                # The capability caught the uncertainty itself: its answer cannot be trusted.
                outcome = _uncertain(step, context.receipts)
        outcome = await _as_the_ledger_knows(state, context, outcome, unfinished)
        traced.ended(str(outcome.status))
    outcome.derived_from = used
    data: dict[str, JsonValue] = {"capability_id": cap.id, "status": str(outcome.status)}
    if outcome.evidence is not None:
        data["evidence_id"] = outcome.evidence.id
    if outcome.reason:
        data["reason"] = outcome.reason
    if outcome.error_type is not None:
        # The type only: an exception's message may hold secrets.
        error_data: dict[str, JsonValue] = {"type": outcome.error_type}
        if outcome.error is not None:
            error_data["retryable"] = outcome.error.retryable
            if outcome.error.code is not None:
                error_data["code"] = outcome.error.code
        data["error"] = error_data
    if step.approval is not None:
        data["approval_digest"] = step.approval.digest
    outcome.event = recorder.emit(
        f"step.{outcome.status}",
        data,
        cause=started,
        step_id=step.step_id,
        category=EventCategory.AUDIT,
    )
    for receipt in outcome.receipts:
        if receipt.status is ReceiptStatus.UNCERTAIN:
            # Operators reconcile these (``store.reconcile``); the user was told "being verified".
            recorder.emit(
                "effect.uncertain",
                {
                    "capability_id": cap.id,
                    "idempotency_key": receipt.idempotency_key,
                    "receipt_id": receipt.id,
                    "reason": receipt.error,
                },
                cause=outcome.event,
                step_id=step.step_id,
                category=EventCategory.AUDIT,
            )
    return outcome


async def _as_the_ledger_knows(
    state: TurnState, context: CapabilityContext, outcome: StepOutcome, unfinished: str | None
) -> StepOutcome:
    """The outcome of a step that left writes unfinished, from the ledger's current receipts.

    Reads only when a ``run_effect`` call of the step was interrupted (no read otherwise). An
    unknown outcome wins over everything the capability said; a write that went through is
    never reported as failed or as not done. ``unfinished`` is the ``applied`` reason of a step
    that stopped (its timeout, or an exception): ``None`` when the capability returned.
    """
    decided = await _decided(state, context, outcome, unfinished)
    if decided is not outcome:
        decided.error_type = outcome.error_type  # the step's event still names the exception
    return decided


async def _decided(
    state: TurnState, context: CapabilityContext, outcome: StepOutcome, unfinished: str | None
) -> StepOutcome:
    copies: dict[str, EffectReceipt] = {}
    keys = context.interrupted
    if keys:
        read = getattr(state.scope, "receipts", None)
        found = {} if read is None else {r.idempotency_key: r for r in await read(list(keys))}
        for key in keys:
            receipt = found.get(key)
            if read is None:
                copies[key] = _unknown(state, context, key)  # nothing to ask: fail closed
            elif receipt is None or receipt.status is ReceiptStatus.FAILED:
                continue  # never started, or provably not called: "try again" is true
            elif receipt.status in (ReceiptStatus.COMPLETED, ReceiptStatus.UNCERTAIN):
                copies[key] = receipt
            else:  # prepared: interrupted between the durable start and a recorded end
                copies[key] = receipt.model_copy(
                    update={"status": ReceiptStatus.UNCERTAIN, "error": INTERRUPTED}
                )
    if not copies and unfinished is None:
        return outcome
    merged = {r.idempotency_key: r for r in outcome.receipts}
    merged.update(copies)
    receipts = list(merged.values())
    step = outcome.step
    if any(r.status is ReceiptStatus.UNCERTAIN for r in receipts):
        return _uncertain(step, receipts)
    if any(r.status is ReceiptStatus.COMPLETED for r in copies.values()) or (
        unfinished is not None and any(r.status is ReceiptStatus.COMPLETED for r in receipts)
    ):
        return StepOutcome(
            step=step, status=StepStatus.APPLIED, reason=unfinished or APPLIED, receipts=receipts
        )
    return outcome


def _log_failure(state: TurnState, step: PlannedStep, exc: Exception, error: StepError) -> None:
    """The operator's record of a step that raised: the server's log gets the traceback (the
    answer, the checkpoint and the events never get the exception's message)."""
    logger.log(
        logging.WARNING if error.retryable else logging.ERROR,
        "step %s (%s) of turn %s in thread %s raised %s; the step failed (retryable=%s)",
        step.step_id,
        step.capability.id,
        state.turn.turn_id,
        state.turn.thread_id,
        type_name(exc),
        error.retryable,
        exc_info=exc,
    )


def _unknown(state: TurnState, context: CapabilityContext, key: str) -> EffectReceipt:
    """A checkpoint copy for an interrupted write the scope cannot read back."""
    now = state.runtime.clock()
    return EffectReceipt(
        id="unknown",
        thread_id=context.turn.thread_id,
        idempotency_key=key,
        capability_id=context.capability_id,
        turn_id=context.turn.turn_id,
        step_id=context.step_id,
        status=ReceiptStatus.UNCERTAIN,
        error=INTERRUPTED,
        attempts=1,
        created_at=now,
        updated_at=now,
    )


async def execute(state: TurnState) -> None:
    assert state.plan is not None
    steps = state.plan.steps
    done: dict[str, StepOutcome] = {}
    if len(steps) == 1 and not steps[0].after:
        done[steps[0].step_id] = await _call(state, steps[0], done)
    elif steps:
        finished = {s.step_id: asyncio.Event() for s in steps}
        try:
            async with asyncio.TaskGroup() as group:
                for step in steps:
                    group.create_task(_run_step(state, step, done, finished))
        except BaseExceptionGroup as group_error:
            # A crashing capability aborts the turn; surface its own exception, not a group.
            raise _first(group_error) from None
    state.outcomes = [done[s.step_id] for s in steps]


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group.exceptions[0]
