"""The fast paths of the shared document codec agree with the precise ones."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings

from intention_kernel.contracts import (
    CheckpointCorruptError,
    EffectReceipt,
    ErrorCode,
    KernelCheckpoint,
    ReceiptStatus,
    SerializationError,
)
from intention_kernel.contracts.turns import DurableTurnResult
from intention_kernel.durability._documents import decode_model, decode_own_model, encode_model

from ..contracts.test_codec import json_values

AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2)))


def result(metadata: Any, response: Any) -> DurableTurnResult:
    receipt = EffectReceipt(
        id="rcpt_1",
        thread_id="t",
        idempotency_key="k",
        capability_id="c",
        turn_id="u",
        status=ReceiptStatus.COMPLETED,
        value=response,
        attempts=1,
        created_at=AT,
        updated_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    checkpoint = KernelCheckpoint(
        revision=3, agent_fingerprint="a", metadata={"m": metadata}, receipts=[receipt]
    )
    return DurableTurnResult(
        thread_id="t", turn_id="u", trace_id="x", response=response, checkpoint=checkpoint
    )


@settings(max_examples=200, deadline=None)
@given(json_values, json_values)
def test_own_text_decodes_to_the_same_model(metadata: Any, response: Any) -> None:
    text = encode_model(result(metadata, response), what="turn result")
    precise = decode_model(DurableTurnResult, text, what="turn result")
    fast = decode_own_model(DurableTurnResult, text, what="turn result")
    assert fast == precise
    assert json.dumps(fast.model_dump(mode="json")) == json.dumps(precise.model_dump(mode="json"))


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_shaped_encoding_stores_what_the_precise_encoder_stores(value: Any) -> None:
    text = encode_model(result(value, [value, 2**62, 1e-9, "\u2028\x1f"]), what="turn result")
    dumped = result(value, [value, 2**62, 1e-9, "\u2028\x1f"]).model_dump(mode="json")
    assert json.loads(text) == json.loads(json.dumps(dumped, ensure_ascii=False))


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (float("nan"), ErrorCode.NON_FINITE_NUMBER),
        ([1.0, float("-inf")], ErrorCode.NON_FINITE_NUMBER),
        ("a\x00b", ErrorCode.NOT_SERIALIZABLE),
        ("a\ud800", ErrorCode.NOT_SERIALIZABLE),
        (2**63, ErrorCode.INTEGER_OUT_OF_RANGE),
        ([-(2**63)], ErrorCode.INTEGER_OUT_OF_RANGE),
        ({"n": 10**5000}, ErrorCode.INTEGER_OUT_OF_RANGE),
    ],
)
def test_shaped_encoding_still_refuses(value: Any, code: ErrorCode) -> None:
    with pytest.raises(SerializationError) as info:
        encode_model(result(value, None), what="turn result")
    assert info.value.code is code


def test_shaped_encoding_keeps_nan_text_inside_strings() -> None:
    text = encode_model(result("NaN and Infinity", None), what="turn result")
    assert json.loads(text)["checkpoint"]["metadata"]["m"] == "NaN and Infinity"


def test_own_decode_refuses_unreadable_text() -> None:
    with pytest.raises(CheckpointCorruptError):
        decode_own_model(DurableTurnResult, '{"thread_id": 1}', what="checkpoint")
