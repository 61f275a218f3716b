"""Pure effect-ledger rules shared by every adapter (no I/O), so SQL adapters cannot drift.

An adapter reads the stored receipt inside its transaction, asks ``start_effect`` what to do,
writes the receipt it returns (if any), and commits.

A ``prepared`` receipt while no live holder has the thread's lease was left by a turn that
ended before recording the outcome (a crash, or a lost ``completed`` write): its provider call
may or may not have happened, so for every operator purpose it is uncertain
(``needs_operator``). It stays stored as ``prepared``; ``reconcile`` resolves it while holding
the thread's lease itself (``reconcile_takes_lease``), so no turn can be running it.

A receipt keeps the fingerprint of its request: the same key asked with another request is a
caller bug (``EFFECT_REQUEST_MISMATCH``) whatever the receipt's status, decided before any
provider call. Receipts without a fingerprint (written before, or run without a request) are
never compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from pydantic import JsonValue

from ..contracts.errors import (
    EffectConflictError,
    EffectNotAppliedError,
    EffectUncertainError,
    ErrorCode,
)
from ..contracts.ids import new_id
from ..contracts.receipts import (
    EffectIdentity,
    EffectReceipt,
    ReceiptStatus,
    ReconcileOutcome,
    ReconciliationRecord,
)

__all__ = [
    "INTERRUPTED",
    "EffectAction",
    "EffectStart",
    "correct_reconciled",
    "finish_receipt",
    "needs_operator",
    "outcome_status",
    "own_prepared",
    "reconcile_receipt",
    "reconcile_takes_lease",
    "resolve_uncertain",
    "start_effect",
    "uncertain_error",
]

INTERRUPTED = "interrupted: a previous attempt did not finish"


class EffectAction(Enum):
    EXECUTE = "execute"
    """``receipt`` (prepared) must be committed, then the operation called."""
    REPLAY = "replay"
    """``receipt`` is completed: return its value, call nothing."""
    UNCERTAIN = "uncertain"
    """``receipt`` is uncertain: raise ``EffectUncertainError``, call nothing."""


@dataclass(frozen=True, slots=True)
class EffectStart:
    action: EffectAction
    receipt: EffectReceipt
    write: bool
    """True when ``receipt`` differs from what is stored and must be written."""


def start_effect(
    existing: EffectReceipt | None,
    identity: EffectIdentity,
    *,
    thread_id: str,
    turn_id: str,
    now: datetime,
) -> EffectStart:
    """Decide how a ``run_effect`` call starts, given the stored receipt for its key.

    ``now`` stamps what it writes. A start made again with the same ``now`` after a lost answer
    finds its own ``prepared`` (``own_prepared``): nothing called the provider yet, so it is
    executed, not taken for an interrupted attempt's (uncertain)."""
    request_fingerprint = identity.request_fingerprint
    if existing is None:
        receipt = EffectReceipt(
            id=new_id("rcpt"),
            thread_id=thread_id,
            idempotency_key=identity.idempotency_key,
            capability_id=identity.capability_id,
            turn_id=turn_id,
            step_id=identity.step_id,
            status=ReceiptStatus.PREPARED,
            attempts=1,
            created_at=now,
            updated_at=now,
            request_fingerprint=request_fingerprint,
        )
        return EffectStart(EffectAction.EXECUTE, receipt, write=True)
    if existing.capability_id != identity.capability_id:
        raise EffectConflictError(
            "this idempotency key is already used by another capability",
            context={
                "thread_id": thread_id,
                "idempotency_key": identity.idempotency_key,
                "capability_id": identity.capability_id,
                "bound_capability_id": existing.capability_id,
            },
        )
    stored = existing.request_fingerprint
    if stored is not None and request_fingerprint is not None and stored != request_fingerprint:
        raise EffectConflictError(
            "this idempotency key was already used for a different request",
            code=ErrorCode.EFFECT_REQUEST_MISMATCH,
            context={
                "thread_id": thread_id,
                "idempotency_key": identity.idempotency_key,
                "capability_id": identity.capability_id,
                "stored_fingerprint": stored,
                "request_fingerprint": request_fingerprint,
                "status": str(existing.status),
            },
        )
    if existing.status is ReceiptStatus.COMPLETED:
        return EffectStart(EffectAction.REPLAY, existing, write=False)
    if existing.status is ReceiptStatus.UNCERTAIN:
        return EffectStart(EffectAction.UNCERTAIN, existing, write=False)
    if existing.status is ReceiptStatus.PREPARED:
        if own_prepared(existing, identity, turn_id=turn_id, now=now):
            return EffectStart(EffectAction.EXECUTE, existing, write=False)
        receipt = existing.model_copy(
            update={"status": ReceiptStatus.UNCERTAIN, "error": INTERRUPTED, "updated_at": now}
        )
        return EffectStart(EffectAction.UNCERTAIN, receipt, write=True)
    # FAILED: the host proved the write did not happen; retry with the same receipt id.
    receipt = existing.model_copy(
        update={
            "status": ReceiptStatus.PREPARED,
            "turn_id": turn_id,
            "step_id": identity.step_id,
            "error": None,
            "attempts": existing.attempts + 1,
            "updated_at": now,
            "request_fingerprint": stored or request_fingerprint,
        }
    )
    return EffectStart(EffectAction.EXECUTE, receipt, write=True)


def own_prepared(
    stored: EffectReceipt | None, identity: EffectIdentity, *, turn_id: str, now: datetime
) -> bool:
    """Whether ``stored`` is the ``prepared`` a ``start_effect(..., now=now)`` of this turn
    wrote. After a lost answer to that write, this is how the caller learns it landed: an
    earlier attempt's ``prepared`` was written before this turn held the lease, at another
    time (the engine takes ``now`` once per start)."""
    return (
        stored is not None
        and stored.status is ReceiptStatus.PREPARED
        and stored.updated_at == now
        and stored.turn_id == turn_id
        and stored.step_id == identity.step_id
        and stored.idempotency_key == identity.idempotency_key
    )


def outcome_status(error: BaseException | None) -> ReceiptStatus:
    """Status after the operation: only ``EffectNotAppliedError`` proves nothing happened."""
    if error is None:
        return ReceiptStatus.COMPLETED
    if isinstance(error, EffectNotAppliedError):
        return ReceiptStatus.FAILED
    return ReceiptStatus.UNCERTAIN


def finish_receipt(
    prepared: EffectReceipt,
    status: ReceiptStatus,
    *,
    value: JsonValue = None,
    error: str | None = None,
    now: datetime,
) -> EffectReceipt:
    """The receipt to store after the operation ended."""
    return prepared.model_copy(
        update={
            "status": status,
            "value": value if status is ReceiptStatus.COMPLETED else None,
            "error": error,
            "updated_at": now,
        }
    )


def needs_operator(status: ReceiptStatus, *, lease_held: bool) -> bool:
    """Whether a receipt waits for an operator (is listed and counted as uncertain):
    ``uncertain``, or ``prepared`` while no live holder has the thread's lease (interrupted)."""
    return status is ReceiptStatus.UNCERTAIN or (
        status is ReceiptStatus.PREPARED and not lease_held
    )


def reconcile_takes_lease(existing: EffectReceipt | None) -> bool:
    """Whether ``reconcile`` must hold the thread's lease (moving its epoch) for its write: a
    ``prepared`` receipt may belong to a running turn, which the lease waits for and fences."""
    return existing is not None and existing.status is ReceiptStatus.PREPARED


def reconcile_receipt(
    existing: EffectReceipt | None,
    outcome: ReconcileOutcome,
    *,
    thread_id: str,
    idempotency_key: str,
    value: JsonValue,
    now: datetime,
    holds_lease: bool = False,
) -> EffectReceipt:
    """The receipt after an operator resolution: ``uncertain`` receipts can be resolved, and
    ``prepared`` ones when the caller holds the thread's lease (no turn runs the effect, so
    it was interrupted and its outcome is unknown)."""
    if existing is None:
        raise EffectConflictError(
            "no receipt exists for this key in this thread",
            code=ErrorCode.RECEIPT_NOT_FOUND,
            context={"thread_id": thread_id, "idempotency_key": idempotency_key},
        )
    if not (
        existing.status is ReceiptStatus.UNCERTAIN
        or (existing.status is ReceiptStatus.PREPARED and holds_lease)
    ):
        raise EffectConflictError(
            "only an uncertain (or interrupted prepared) receipt can be reconciled",
            code=ErrorCode.RECEIPT_NOT_UNCERTAIN,
            context={
                "thread_id": thread_id,
                "idempotency_key": idempotency_key,
                "status": str(existing.status),
            },
        )
    return _reconciled(existing, outcome, value=value, now=now)


def correct_reconciled(
    existing: EffectReceipt | None,
    last: ReconciliationRecord | None,
    outcome: ReconcileOutcome,
    *,
    thread_id: str,
    idempotency_key: str,
    value: JsonValue,
    now: datetime,
) -> EffectReceipt:
    """The receipt after an operator corrects its reconciliation: allowed only while the
    receipt is exactly as ``last`` (the key's latest reconciliation) left it, so a correction
    never overrides what a later turn recorded (a retry after ``not_applied``, say)."""
    if existing is None:
        raise EffectConflictError(
            "no receipt exists for this key in this thread",
            code=ErrorCode.RECEIPT_NOT_FOUND,
            context={"thread_id": thread_id, "idempotency_key": idempotency_key},
        )
    left = ReceiptStatus.COMPLETED if last and last.outcome == "completed" else ReceiptStatus.FAILED
    if (
        last is None
        or last.receipt_id != existing.id
        or last.recorded_at != existing.updated_at
        or existing.status is not left
    ):
        raise EffectConflictError(
            "only a receipt still as its last reconciliation left it can be corrected",
            code=ErrorCode.RECEIPT_NOT_RECONCILED,
            context={
                "thread_id": thread_id,
                "idempotency_key": idempotency_key,
                "status": str(existing.status),
            },
        )
    return _reconciled(existing, outcome, value=value, now=now)


def resolve_uncertain(
    existing: EffectReceipt | None,
    outcome: ReconcileOutcome,
    *,
    thread_id: str,
    idempotency_key: str,
    value: JsonValue,
    note: str,
    actor: str,
    now: datetime,
    holds_lease: bool = False,
    correct: bool = False,
    last: ReconciliationRecord | None = None,
) -> tuple[EffectReceipt, ReconciliationRecord]:
    """The resolved receipt and its audit record, for an adapter to write in one transaction
    (``previous_status`` is the stored status: ``uncertain`` or ``prepared``, or for a
    correction ``completed``/``failed`` with ``supersedes`` naming ``last``)."""
    if correct:
        receipt = correct_reconciled(
            existing,
            last,
            outcome,
            thread_id=thread_id,
            idempotency_key=idempotency_key,
            value=value,
            now=now,
        )
    else:
        receipt = reconcile_receipt(
            existing,
            outcome,
            thread_id=thread_id,
            idempotency_key=idempotency_key,
            value=value,
            now=now,
            holds_lease=holds_lease,
        )
    assert existing is not None  # both refused a missing receipt
    record = ReconciliationRecord(
        id=new_id("rec"),
        thread_id=thread_id,
        idempotency_key=idempotency_key,
        receipt_id=receipt.id,
        previous_status=existing.status,
        outcome=outcome,
        value=value,
        note=note,
        actor=actor,
        recorded_at=now,
        supersedes=last.id if correct and last is not None else None,
    )
    return receipt, record


def uncertain_error(
    receipt: EffectReceipt, *, code: ErrorCode | None = None
) -> EffectUncertainError:
    return EffectUncertainError(
        code=code,
        context={
            "thread_id": receipt.thread_id,
            "idempotency_key": receipt.idempotency_key,
            "receipt_id": receipt.id,
            "capability_id": receipt.capability_id,
            "since": receipt.updated_at.isoformat(),
            "reason": receipt.error,
        },
        receipt=receipt,
    )


def _reconciled(
    existing: EffectReceipt, outcome: ReconcileOutcome, *, value: JsonValue, now: datetime
) -> EffectReceipt:
    """The receipt as an operator's decision leaves it (``not_applied`` becomes ``failed``)."""
    status = ReceiptStatus.COMPLETED if outcome == "completed" else ReceiptStatus.FAILED
    error = None if outcome == "completed" else "reconciled: not applied"
    return finish_receipt(existing, status, value=value, error=error, now=now)
