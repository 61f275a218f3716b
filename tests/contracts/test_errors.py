from __future__ import annotations

import json
from datetime import UTC, datetime

import intention_kernel
from intention_kernel.contracts import (
    DurabilityError,
    EffectNotAppliedError,
    EffectReceipt,
    EffectUncertainError,
    ErrorCode,
    KernelError,
    LeaseLostError,
    ReceiptStatus,
)
from intention_kernel.contracts import errors as errors_module


def test_to_json_is_safe_and_never_includes_the_cause() -> None:
    try:
        try:
            raise ValueError("password=hunter2")
        except ValueError as cause:
            raise DurabilityError("the store failed", context={"thread_id": "t1"}) from cause
    except DurabilityError as exc:
        payload = exc.to_json()
    assert payload == {
        "error": "DurabilityError",
        "code": "STORE_ERROR",
        "message": "the store failed",
        "retryable": False,
        "context": {"thread_id": "t1"},
    }
    assert "hunter2" not in json.dumps(payload)


def test_defaults_per_class() -> None:
    assert LeaseLostError().code == ErrorCode.LEASE_LOST
    assert LeaseLostError().retryable
    assert EffectNotAppliedError("declined").code == ErrorCode.EFFECT_NOT_APPLIED
    assert str(EffectNotAppliedError("declined")) == "[EFFECT_NOT_APPLIED] declined"


def test_every_error_class_derives_from_the_root_and_is_exported() -> None:
    for name in errors_module.__all__:
        obj = getattr(errors_module, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, KernelError)
            assert name in intention_kernel.__all__


def test_error_codes_are_unique_stable_strings() -> None:
    values = [code.value for code in ErrorCode]
    assert len(values) == len(set(values))
    assert all(value == name for name, value in ErrorCode.__members__.items())


def test_public_all_is_unique_and_complete() -> None:
    names = intention_kernel.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(intention_kernel, name)


def test_an_uncertain_error_carries_the_ledgers_receipt_but_never_shows_it() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    receipt = EffectReceipt(
        id="rcpt-1",
        thread_id="t1",
        idempotency_key="payments.charge:k",
        capability_id="payments.charge",
        turn_id="turn-1",
        status=ReceiptStatus.UNCERTAIN,
        value={"card": "4111-1111-1111-1111"},
        attempts=1,
        created_at=now,
        updated_at=now,
    )
    assert EffectUncertainError().receipt is None
    error = EffectUncertainError(context={"receipt_id": "rcpt-1"}, receipt=receipt)
    assert error.receipt is receipt
    assert error.code == ErrorCode.EFFECT_UNCERTAIN and error.context == {"receipt_id": "rcpt-1"}
    assert "4111" not in json.dumps(error.to_json())  # the receipt is data, not a message
