"""An interrupted step answered from the ledger, not from what its capability said.

A step that stopped while a write was under way (its deadline, or a capability that caught a
timeout or error from ``run_effect`` itself) is answered from the ledger: the kernel reads the
current receipts of the interrupted keys (``TurnScope.receipts``). ``uncertain`` or
``prepared`` -> the step is ``uncertain`` ("being verified"); ``completed`` -> ``applied`` ("it
went through, but I could not finish in time"); ``failed`` or none (stopped before the provider
was called) -> a plain failure. A step that raised after a write of it completed is ``applied``
the same way: never reported as failed.
"""

from __future__ import annotations

from ...contracts.receipts import EffectReceipt, ReceiptStatus
from .._context import CapabilityContext
from .._states import StepStatus
from ._outcomes import APPLIED, _uncertain
from .state import StepOutcome, TurnState

__all__ = ["INTERRUPTED"]

INTERRUPTED = "interrupted before its outcome was recorded"


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
