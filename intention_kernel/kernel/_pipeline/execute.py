"""Stage: execution. Runs the planned steps: independent ones concurrently, dependents after.

Each step is a task in one task group. A step waits for the steps it depends on, then runs its
capability with a fresh ``CapabilityContext`` (ports, visible facts including those produced
earlier in this turn, turn info, execution ids, deadline, its own event branch, and
``run_effect`` for writes). Handled outcomes become data (``_outcomes``), and so does an
exception from a capability: the step fails with a reason in the kernel's words and a
``retryable`` flag (``failures``; a typed refusal of the ledger such as
``EFFECT_REQUEST_MISMATCH`` included), its event names the exception's type, never its message,
and the turn commits. Only errors of the turn itself leave it uncommitted: the store
(``DurabilityError``), the turn's deadline, a cancellation. A step that stopped while a write
was under way is answered from the ledger (``_interrupted``).
"""

from __future__ import annotations

import asyncio
import logging
from types import MappingProxyType

from pydantic import JsonValue

from ...contracts.checkpoint import FactRecord
from ...contracts.errors import EffectNotAppliedError, EffectUncertainError
from ...contracts.events import EventCategory
from ...contracts.receipts import ReceiptStatus
from ...telemetry import step_span
from .._context import CapabilityContext, StepEvents
from .._facts import apply_fact
from .._failures import StepError, classify, must_propagate, reason_for, type_name
from .._states import StepStatus
from ._interrupted import _as_the_ledger_knows
from ._outcomes import (
    APPLIED,
    APPLIED_UNFINISHED,
    NOT_APPLIED,
    TOO_LONG,
    _failed,
    _outcome,
    _storable,
    _uncertain,
    _with_receipt,
)
from .state import PlannedStep, StepOutcome, TurnState

__all__ = ["execute"]

logger = logging.getLogger("intention_kernel.kernel")


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
        external=step.external,
        completion=state.runtime.completion,
        request=step.input_json,
        deps=state.deps,
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


async def execute(state: TurnState, steps: list[PlannedStep] | None = None) -> None:
    """Run ``steps`` (the plan's, by default: a further round passes its own) and add their
    outcomes to the turn's, in plan order."""
    assert state.plan is not None
    if steps is None:
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
    state.outcomes.extend(done[s.step_id] for s in steps)


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group.exceptions[0]
