"""Table tests of the pure ledger and turn rules every adapter shares."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import (
    ConfigurationError,
    EffectConflictError,
    EffectIdentity,
    EffectNotAppliedError,
    EffectReceipt,
    ErrorCode,
    JsonLimits,
    ReceiptStatus,
    ReconcileOutcome,
    ReconciliationRecord,
    TurnConflictError,
)
from intention_kernel.durability import _ledger, _turns
from intention_kernel.durability._ledger import EffectAction
from intention_kernel.testing import MemoryDurability

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = datetime(2026, 1, 1, 0, 5, 0, 123456, tzinfo=UTC)
IDENTITY = EffectIdentity("payments.charge:k", "payments.charge", step_id="s2")


def receipt(status: ReceiptStatus, capability: str = "payments.charge") -> EffectReceipt:
    return EffectReceipt(
        id="rcpt_1",
        thread_id="t",
        idempotency_key="payments.charge:k",
        capability_id=capability,
        turn_id="turn-0",
        status=status,
        value="v" if status is ReceiptStatus.COMPLETED else None,
        attempts=1,
        created_at=NOW,
        updated_at=NOW,
    )


@pytest.mark.parametrize(
    ("stored", "action", "write", "status_after"),
    [
        (None, EffectAction.EXECUTE, True, ReceiptStatus.PREPARED),
        (ReceiptStatus.FAILED, EffectAction.EXECUTE, True, ReceiptStatus.PREPARED),
        (ReceiptStatus.COMPLETED, EffectAction.REPLAY, False, ReceiptStatus.COMPLETED),
        (ReceiptStatus.PREPARED, EffectAction.UNCERTAIN, True, ReceiptStatus.UNCERTAIN),
        (ReceiptStatus.UNCERTAIN, EffectAction.UNCERTAIN, False, ReceiptStatus.UNCERTAIN),
    ],
)
def test_start_effect_table(
    stored: ReceiptStatus | None, action: EffectAction, write: bool, status_after: ReceiptStatus
) -> None:
    existing = None if stored is None else receipt(stored)
    start = _ledger.start_effect(existing, IDENTITY, thread_id="t", turn_id="turn-1", now=NOW)
    assert (start.action, start.write, start.receipt.status) == (action, write, status_after)
    if existing is not None:
        assert start.receipt.id == existing.id


@pytest.mark.parametrize("stored_from", [None, ReceiptStatus.FAILED])
def test_a_start_made_again_with_its_time_finds_its_own_prepared(
    stored_from: ReceiptStatus | None,
) -> None:
    """After a lost answer: the same start (same ``now``) executes its own ``prepared``, writing
    nothing; any other ``prepared`` (another time, turn or step) is an interrupted one."""
    before = None if stored_from is None else receipt(stored_from)
    first = _ledger.start_effect(before, IDENTITY, thread_id="t", turn_id="turn-1", now=LATER)
    again = _ledger.start_effect(
        first.receipt, IDENTITY, thread_id="t", turn_id="turn-1", now=LATER
    )
    assert (again.action, again.write, again.receipt) == (
        EffectAction.EXECUTE,
        False,
        first.receipt,
    )
    assert _ledger.own_prepared(first.receipt, IDENTITY, turn_id="turn-1", now=LATER)
    for other in (
        {"now": LATER + timedelta(microseconds=1)},
        {"turn_id": "turn-2"},
        {"identity": replace(IDENTITY, step_id="s3")},
    ):
        args: dict[str, Any] = {"identity": IDENTITY, "turn_id": "turn-1", "now": LATER, **other}
        start = _ledger.start_effect(first.receipt, thread_id="t", **args)
        assert (start.action, start.write) == (EffectAction.UNCERTAIN, True)
        assert start.receipt.status is ReceiptStatus.UNCERTAIN


def test_retry_of_failed_keeps_the_receipt_id_and_counts_attempts() -> None:
    start = _ledger.start_effect(
        receipt(ReceiptStatus.FAILED), IDENTITY, thread_id="t", turn_id="turn-2", now=NOW
    )
    assert start.receipt.id == "rcpt_1"
    assert start.receipt.attempts == 2
    assert (start.receipt.turn_id, start.receipt.step_id) == ("turn-2", "s2")


def test_start_effect_refuses_a_key_of_another_capability() -> None:
    with pytest.raises(EffectConflictError) as caught:
        _ledger.start_effect(
            receipt(ReceiptStatus.COMPLETED, "refunds.create"),
            IDENTITY,
            thread_id="t",
            turn_id="u",
            now=NOW,
        )
    assert caught.value.code == ErrorCode.IDEMPOTENCY_KEY_COLLISION


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (None, ReceiptStatus.COMPLETED),
        (EffectNotAppliedError("no"), ReceiptStatus.FAILED),
        (TimeoutError(), ReceiptStatus.UNCERTAIN),
        (ConnectionResetError(), ReceiptStatus.UNCERTAIN),
        (KeyboardInterrupt(), ReceiptStatus.UNCERTAIN),
    ],
)
def test_outcome_status_table(error: BaseException | None, status: ReceiptStatus) -> None:
    assert _ledger.outcome_status(error) is status


@pytest.mark.parametrize(
    ("stored", "outcome", "result"),
    [
        (ReceiptStatus.UNCERTAIN, "completed", ReceiptStatus.COMPLETED),
        (ReceiptStatus.UNCERTAIN, "not_applied", ReceiptStatus.FAILED),
        (ReceiptStatus.PREPARED, "completed", ErrorCode.RECEIPT_NOT_UNCERTAIN),
        (ReceiptStatus.COMPLETED, "not_applied", ErrorCode.RECEIPT_NOT_UNCERTAIN),
        (ReceiptStatus.FAILED, "completed", ErrorCode.RECEIPT_NOT_UNCERTAIN),
        (None, "completed", ErrorCode.RECEIPT_NOT_FOUND),
    ],
)
def test_reconcile_table(
    stored: ReceiptStatus | None, outcome: ReconcileOutcome, result: object
) -> None:
    existing = None if stored is None else receipt(stored)
    if isinstance(result, ReceiptStatus):
        done = _ledger.reconcile_receipt(
            existing, outcome, thread_id="t", idempotency_key="k", value=None, now=NOW
        )
        assert done.status is result
    else:
        with pytest.raises(EffectConflictError) as caught:
            _ledger.reconcile_receipt(
                existing, outcome, thread_id="t", idempotency_key="k", value=None, now=NOW
            )
        assert caught.value.code == result


@pytest.mark.parametrize(
    ("stored", "outcome", "result"),
    [
        (ReceiptStatus.PREPARED, "completed", ReceiptStatus.COMPLETED),
        (ReceiptStatus.PREPARED, "not_applied", ReceiptStatus.FAILED),
        (ReceiptStatus.UNCERTAIN, "completed", ReceiptStatus.COMPLETED),
        (ReceiptStatus.COMPLETED, "not_applied", ErrorCode.RECEIPT_NOT_UNCERTAIN),
        (ReceiptStatus.FAILED, "completed", ErrorCode.RECEIPT_NOT_UNCERTAIN),
        (None, "completed", ErrorCode.RECEIPT_NOT_FOUND),
    ],
)
def test_reconcile_table_holding_the_lease(
    stored: ReceiptStatus | None, outcome: ReconcileOutcome, result: object
) -> None:
    """Holding the thread's lease, a ``prepared`` receipt is interrupted: it is resolved like
    an uncertain one, and the audit record keeps ``prepared`` as the previous status."""
    existing = None if stored is None else receipt(stored)
    if isinstance(result, ReceiptStatus):
        value: JsonValue = {"charge": 1} if outcome == "completed" else None
        done, record = _ledger.resolve_uncertain(
            existing,
            outcome,
            thread_id="t",
            idempotency_key="k",
            value=value,
            note="n",
            actor="a",
            now=NOW,
            holds_lease=True,
        )
        assert (done.status, done.value, done.id) == (result, value, "rcpt_1")
        assert record.previous_status is stored and record.receipt_id == "rcpt_1"
    else:
        with pytest.raises(EffectConflictError) as caught:
            _ledger.reconcile_receipt(
                existing,
                outcome,
                thread_id="t",
                idempotency_key="k",
                value=None,
                now=NOW,
                holds_lease=True,
            )
        assert caught.value.code == result


@pytest.mark.parametrize(
    ("status", "lease_held", "waits"),
    [
        (ReceiptStatus.UNCERTAIN, False, True),
        (ReceiptStatus.UNCERTAIN, True, True),
        (ReceiptStatus.PREPARED, False, True),
        (ReceiptStatus.PREPARED, True, False),
        (ReceiptStatus.COMPLETED, False, False),
        (ReceiptStatus.FAILED, False, False),
    ],
)
def test_needs_operator_table(status: ReceiptStatus, lease_held: bool, waits: bool) -> None:
    assert _ledger.needs_operator(status, lease_held=lease_held) is waits
    assert _ledger.reconcile_takes_lease(receipt(status)) is (status is ReceiptStatus.PREPARED)


@pytest.mark.parametrize(
    ("stored", "requested", "conflict"),
    [
        (None, None, False),
        (None, "a", False),
        ("a", None, False),
        ("a", "a", False),
        ("a", "b", True),
    ],
)
def test_fingerprint_table(stored: str | None, requested: str | None, conflict: bool) -> None:
    if conflict:
        with pytest.raises(TurnConflictError) as caught:
            _turns.check_fingerprint(stored, requested, thread_id="t", turn_id="u")
        assert caught.value.code == ErrorCode.TURN_ID_REUSED
    else:
        _turns.check_fingerprint(stored, requested, thread_id="t", turn_id="u")


@pytest.mark.parametrize(("loaded", "stored"), [(0, 1), (3, 2), (5, 7)])
def test_revision_compare_and_set_refuses_any_mismatch(loaded: int, stored: int) -> None:
    with pytest.raises(TurnConflictError) as caught:
        _turns.check_revision(loaded, stored, thread_id="t")
    assert caught.value.code == ErrorCode.CHECKPOINT_REVISION_CONFLICT
    _turns.check_revision(stored, stored, thread_id="t")


@pytest.mark.parametrize("status", list(ReceiptStatus))
def test_another_request_under_a_key_is_refused_whatever_the_status(status: ReceiptStatus) -> None:
    stored = receipt(status).model_copy(update={"request_fingerprint": "a" * 64})
    asked = replace(IDENTITY, request_fingerprint="b" * 64)
    with pytest.raises(EffectConflictError) as caught:
        _ledger.start_effect(stored, asked, thread_id="t", turn_id="turn-1", now=NOW)
    assert caught.value.code == ErrorCode.EFFECT_REQUEST_MISMATCH
    assert caught.value.context["stored_fingerprint"] == "a" * 64
    same = replace(IDENTITY, request_fingerprint="a" * 64)
    _ledger.start_effect(stored, same, thread_id="t", turn_id="turn-1", now=NOW)
    _ledger.start_effect(receipt(status), asked, thread_id="t", turn_id="turn-1", now=NOW)


def test_a_failed_receipt_retried_with_a_request_keeps_its_fingerprint() -> None:
    asked = replace(IDENTITY, request_fingerprint="b" * 64)
    start = _ledger.start_effect(
        receipt(ReceiptStatus.FAILED), asked, thread_id="t", turn_id="turn-1", now=NOW
    )
    assert start.receipt.request_fingerprint == "b" * 64


def record(receipt_id: str, outcome: ReconcileOutcome, at: datetime) -> ReconciliationRecord:
    return ReconciliationRecord(
        id="rec_1",
        thread_id="t",
        idempotency_key="payments.charge:k",
        receipt_id=receipt_id,
        previous_status=ReceiptStatus.UNCERTAIN,
        outcome=outcome,
        note="n",
        actor="ops",
        recorded_at=at,
    )


@pytest.mark.parametrize(
    ("status", "last", "allowed"),
    [
        (ReceiptStatus.COMPLETED, record("rcpt_1", "completed", NOW), True),
        (ReceiptStatus.FAILED, record("rcpt_1", "not_applied", NOW), True),
        (ReceiptStatus.COMPLETED, None, False),
        (ReceiptStatus.FAILED, record("rcpt_1", "completed", NOW), False),
        (ReceiptStatus.COMPLETED, record("rcpt_other", "completed", NOW), False),
        (
            ReceiptStatus.COMPLETED,
            record("rcpt_1", "completed", datetime(2025, 1, 1, tzinfo=UTC)),
            False,
        ),
        (ReceiptStatus.UNCERTAIN, record("rcpt_1", "completed", NOW), False),
    ],
)
def test_only_a_receipt_as_its_last_reconciliation_left_it_is_corrected(
    status: ReceiptStatus, last: ReconciliationRecord | None, allowed: bool
) -> None:
    def correct() -> tuple[EffectReceipt, ReconciliationRecord]:
        return _ledger.resolve_uncertain(
            receipt(status),
            "completed",
            thread_id="t",
            idempotency_key="payments.charge:k",
            value=7,
            note="fix",
            actor="ops",
            now=NOW,
            correct=True,
            last=last,
        )

    if not allowed:
        with pytest.raises(EffectConflictError) as caught:
            correct()
        assert caught.value.code == ErrorCode.RECEIPT_NOT_RECONCILED
        return
    fixed, audit = correct()
    assert (fixed.status, fixed.value) == (ReceiptStatus.COMPLETED, 7)
    assert last is not None and audit.supersedes == last.id


def test_a_store_refuses_limits_deeper_than_its_documents_can_wrap() -> None:
    with pytest.raises(ConfigurationError):
        MemoryDurability(json_limits=JsonLimits(max_depth=249))
    assert MemoryDurability(json_limits=JsonLimits(max_depth=248)).json_limits.max_depth == 248
