from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from intention_kernel.contracts import ErrorCode, InvalidIdError
from intention_kernel.contracts.ids import (
    MAX_ID_LENGTH,
    MAX_KEY_LENGTH,
    new_id,
    validate_idempotency_key,
    validate_thread_id,
    validate_turn_id,
)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "blank"),
        ("  \t ", "forbidden_character"),
        ("   ", "blank"),
        (None, "not_a_string"),
        (7, "not_a_string"),
        (b"abc", "not_a_string"),
        ("x" * (MAX_ID_LENGTH + 1), "too_long"),
        ("a\x00b", "forbidden_character"),
        ("a\nb", "forbidden_character"),
        ("a\x7fb", "forbidden_character"),
        ("a\x85b", "forbidden_character"),
        ("\udc80", "forbidden_character"),
        ("\u200b", "forbidden_character"),
        ("t\u202ex", "forbidden_character"),
        ("\u2066x\u2069", "forbidden_character"),
        ("\ufeffx", "forbidden_character"),
        ("a\u00adb", "forbidden_character"),
        ("a\u2028b", "forbidden_character"),
        ("a\u2029b", "forbidden_character"),
        ("\u00a0", "blank"),
    ],
)
def test_bad_thread_ids_are_refused_with_a_reason(value: Any, reason: str) -> None:
    with pytest.raises(InvalidIdError) as caught:
        validate_thread_id(value)
    assert caught.value.code == ErrorCode.INVALID_THREAD_ID
    assert caught.value.context["reason"] in {reason, "blank", "forbidden_character"}
    assert not caught.value.retryable


def test_each_field_has_its_own_code() -> None:
    with pytest.raises(InvalidIdError) as turn:
        validate_turn_id("")
    with pytest.raises(InvalidIdError) as key:
        validate_idempotency_key("")
    assert turn.value.code == ErrorCode.INVALID_TURN_ID
    assert key.value.code == ErrorCode.INVALID_IDEMPOTENCY_KEY


def test_limits_are_inclusive() -> None:
    assert validate_thread_id("x" * MAX_ID_LENGTH)
    assert validate_idempotency_key("k" * MAX_KEY_LENGTH)
    with pytest.raises(InvalidIdError):
        validate_idempotency_key("k" * (MAX_KEY_LENGTH + 1))


def test_ids_are_exact_strings_without_normalization() -> None:
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert validate_thread_id(composed) == composed
    assert validate_thread_id(decomposed) == decomposed


PRINTABLE: list[Any] = ["L", "M", "N", "P", "S", "Z"]


@given(st.text(alphabet=st.characters(categories=PRINTABLE), min_size=1, max_size=50))
def test_printable_ids_pass_unchanged(value: str) -> None:
    if value.strip():
        assert validate_thread_id(value) == value


def test_new_ids_are_unique_and_time_ordered() -> None:
    ids = [new_id("rcpt") for _ in range(200)]
    assert len(set(ids)) == 200
    stamps = [i.split("_")[1][:12] for i in ids]
    assert stamps == sorted(stamps)


@pytest.mark.parametrize("value", ["caf\u00e9", "日本-42", "a b", "\u00a0x", "emoji-\U0001f600"])
def test_visible_unicode_is_kept_exactly(value: str) -> None:
    """One rule: invisible and display-changing characters (Cc, Cf, Zl, Zp, Cs) are refused,
    every visible character is kept as is (no normalization)."""
    assert validate_thread_id(value) == value
