from __future__ import annotations

import dataclasses
import enum
import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from intention_kernel.contracts import ConfigurationError, ErrorCode, JsonLimits, SerializationError
from intention_kernel.contracts.codec import (
    MAX_INTEGER,
    StoredJson,
    StoredJsonObject,
    _check,
    canonical_json,
    check,
    decode,
    encode,
    fingerprint,
    round_trip,
)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (float("nan"), ErrorCode.NON_FINITE_NUMBER),
        ({"a": [float("inf")]}, ErrorCode.NON_FINITE_NUMBER),
        ({1: "int key"}, ErrorCode.NOT_SERIALIZABLE),
        ({"s": {1, 2}}, ErrorCode.NOT_SERIALIZABLE),
        (b"bytes", ErrorCode.NOT_SERIALIZABLE),
        (object(), ErrorCode.NOT_SERIALIZABLE),
        ("nul\x00", ErrorCode.NOT_SERIALIZABLE),
        ({"k\ud800": 1}, ErrorCode.NOT_SERIALIZABLE),
        (nested(65), ErrorCode.VALUE_TOO_DEEP),
        (nested(5000), ErrorCode.VALUE_TOO_DEEP),
    ],
)
def test_unstorable_values_are_refused_with_a_stable_code(value: Any, code: ErrorCode) -> None:
    with pytest.raises(SerializationError) as caught:
        encode(value)
    assert caught.value.code == code


def test_depth_limit_is_inclusive() -> None:
    assert round_trip(nested(63)) == nested(63)


def test_size_limit_counts_utf8_bytes() -> None:
    limits = JsonLimits(max_bytes=20)
    assert encode("é" * 8, limits=limits) == '"' + "é" * 8 + '"'
    with pytest.raises(SerializationError) as caught:
        encode("é" * 10, limits=limits)
    assert caught.value.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert caught.value.context == {"what": "value", "size": 22, "limit": 20}


def test_round_trip_returns_the_stored_form() -> None:
    assert round_trip({"t": (1, (2, 3)), "f": 1.5, "n": None}) == {
        "t": [1, [2, 3]],
        "f": 1.5,
        "n": None,
    }


@pytest.mark.parametrize(
    "text", ['{"a":1,"a":2}', "[NaN]", "[Infinity]", "{", "[" * 5000 + "]" * 5000]
)
def test_decode_refuses_invalid_stored_json(text: str) -> None:
    with pytest.raises(SerializationError) as caught:
        decode(text)
    assert caught.value.code == ErrorCode.INVALID_JSON


def test_fingerprint_ignores_key_order_and_is_stable() -> None:
    assert fingerprint({"b": 1, "a": [1, 2]}) == fingerprint({"a": [1, 2], "b": 1})
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
    assert (
        fingerprint({"a": 1}) == "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
    )


def test_invalid_limits_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        JsonLimits(max_bytes=0)


NO_SURROGATES: list[Any] = ["L", "M", "N", "P", "S", "Z", "Cc", "Cf"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_INTEGER, MAX_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(categories=NO_SURROGATES, blacklist_characters="\x00")),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(alphabet=st.characters(categories=NO_SURROGATES, blacklist_characters="\x00")),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@given(json_values)
def test_any_json_value_round_trips_exactly(value: Any) -> None:
    assert decode(encode(value)) == value


@given(st.floats())
def test_floats_round_trip_or_are_refused(value: float) -> None:
    if math.isfinite(value):
        assert round_trip(value) == value
    else:
        with pytest.raises(SerializationError):
            encode(value)


awkward_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=5)
    | st.sampled_from(["\x00", "\ud800", "\\u0000", '"[{', "]}"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children)
        | st.dictionaries(st.text(max_size=3) | st.integers() | st.booleans(), children, max_size=3)
    ),
    max_leaves=12,
)


@given(awkward_values, st.integers(1, 6))
def test_fast_path_agrees_with_the_precise_walk(value: Any, depth: int) -> None:
    limits = JsonLimits(max_depth=depth)
    expected: ErrorCode | None = None
    try:
        _check(value, limits, "value")
    except SerializationError as refused:
        expected = refused.code
    if expected is not None:
        with pytest.raises(SerializationError) as caught:
            encode(value, limits=limits)
        assert caught.value.code == expected
        return
    text = encode(value, limits=limits)
    assert decode(text) == round_trip(value, limits=limits)


@pytest.mark.parametrize("value", [MAX_INTEGER, -MAX_INTEGER, [0, {"n": MAX_INTEGER}], 10**18])
def test_integers_in_the_stored_range_round_trip(value: Any) -> None:
    assert decode(encode(value)) == value == round_trip(value)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (MAX_INTEGER + 1, "$"),
        (-(MAX_INTEGER + 1), "$"),
        ({"a": [1, 2**64]}, "$.a[1]"),
        ({"big": 10**5000}, "$.big"),
        ({"a b": [10**4301]}, '$["a b"][0]'),
    ],
)
def test_integers_out_of_range_are_refused_with_their_path(value: Any, path: str) -> None:
    """Never stored (``json`` cannot read 4301 digits back) and never a raw ``ValueError``."""
    for call in (encode, round_trip, canonical_json, fingerprint):
        with pytest.raises(SerializationError) as caught:
            call(value)
        assert caught.value.code == ErrorCode.INTEGER_OUT_OF_RANGE
        assert caught.value.context["path"] == path


@pytest.mark.parametrize(
    ("value", "path", "kind"),
    [
        ({"a": [1, {"b": {1, 2}}]}, "$.a[1].b", "set"),
        ({"when": [datetime(2026, 1, 1, tzinfo=UTC)]}, "$.when[0]", "datetime"),
        ({"price": Decimal("1.5")}, "$.price", "Decimal"),
        ([b"raw"], "$[0]", "bytes"),
        ({"k": {"x": object()}}, "$.k.x", "object"),
    ],
)
def test_non_json_types_name_their_path(value: Any, path: str, kind: str) -> None:
    with pytest.raises(SerializationError) as caught:
        encode(value)
    assert caught.value.context["path"] == path
    assert caught.value.context["type"] == kind


def test_stored_text_that_python_cannot_read_back_is_invalid_json() -> None:
    with pytest.raises(SerializationError) as caught:
        decode('{"n": ' + "1" * 5000 + "}")
    assert caught.value.code == ErrorCode.INVALID_JSON


def test_outbox_and_depth_limits_are_checked() -> None:
    with pytest.raises(ConfigurationError):
        JsonLimits(max_outbox_bytes=0)
    with pytest.raises(ConfigurationError):
        JsonLimits(max_depth=10_000)
    assert JsonLimits().max_outbox_bytes == 8 * 1024 * 1024


class _Doc(BaseModel):
    value: StoredJson = None
    data: StoredJsonObject = {}


def test_model_json_fields_follow_the_codec_rule() -> None:
    """Tuples are JSON arrays (kept as lists); anything else not JSON is the library's error."""
    assert _Doc(value=(1, (2,)), data={"t": (3,)}) == _Doc(value=[1, [2]], data={"t": [3]})
    with pytest.raises(SerializationError) as caught:
        _Doc(data={"s": [{1}]})
    assert caught.value.context["path"] == "$.s[0]"
    with pytest.raises(SerializationError) as deep:
        _Doc(value=nested(5000))
    assert deep.value.code == ErrorCode.VALUE_TOO_DEEP


class _Colour(enum.StrEnum):
    RED = "red"


@dataclasses.dataclass
class _Point:
    x: int


hostile_values = st.recursive(
    awkward_values
    | st.sampled_from(
        [{1, 2}, frozenset(), b"x", datetime(2020, 1, 1), Decimal("1.5"), _Colour.RED, _Point(1)]
    ),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children)
        | st.dictionaries(st.text(max_size=3) | st.integers() | st.booleans(), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=400)
@given(hostile_values, st.integers(1, 6), st.sampled_from([16, 64, 10_000]))
@example(["abcdefgh", "abcdefghij"], 3, 16)  # too large, and nothing else wrong with it
@example({1: "a"}, 3, 10_000)  # a key that would come back as "1"
def test_check_refuses_exactly_as_encode_would(value: Any, depth: int, max_bytes: int) -> None:
    limits = JsonLimits(max_depth=depth, max_bytes=max_bytes)
    expected: ErrorCode | None = None
    try:
        encode(value, limits=limits)
    except SerializationError as refused:
        expected = refused.code
    if expected is None:
        check(value, limits=limits)
        return
    with pytest.raises(SerializationError) as caught:
        check(value, limits=limits)
    assert caught.value.code == expected
