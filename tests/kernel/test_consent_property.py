"""Property: a consent question shows every field its digest covers, and stays bounded.

The question's field list is parsed back here by its documented grammar (``path: value``
separated by ``, ``; a string with punctuation, or characters one cannot see, is a quoted JSON
string; ``…`` marks an elision and appears nowhere else), so a field that is dropped, added
(a memo that forges ``amount_eur: 1``) or cut at either end fails the property.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from intention_kernel.kernel import consent

INT64 = 2**63 - 1
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-INT64, INT64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=300)
)
KEYS = st.text(max_size=120)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=24,
)
OPERATIONS = st.dictionaries(KEYS, VALUES, max_size=10)

QUOTED = r'"(?:\\.|[^"\\])*"'
LABEL = rf"(?:[A-Za-z0-9_\-…]+|\.|\[\d+\]|\[{QUOTED}\])+"
FIELD = re.compile(rf"({LABEL}): ({QUOTED}|[^,\"]*)")
SEGMENT = re.compile(rf"\.?([A-Za-z0-9_\-…]+)|\[(\d+)\]|\[({QUOTED})\]")
HEADLINE = "Send the transfer."


def leaves(value: Any, path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in leaves(v, (*path, k))]
    if isinstance(value, list) and value:
        return [leaf for i, v in enumerate(value) for leaf in leaves(v, (*path, i))]
    return [(path, value)]


def expected(operation: dict[str, Any], first: list[str]) -> list[tuple[tuple[Any, ...], Any]]:
    named = [k for k in dict.fromkeys(first) if k in operation]
    keys = [*named, *(k for k in operation if k not in named)]
    return [leaf for k in keys for leaf in leaves(operation[k], (k,))]


def parse(listed: str) -> list[tuple[str, str]]:
    fields: list[tuple[str, str]] = []
    position = 0
    while position < len(listed):
        match = FIELD.match(listed, position)
        assert match is not None, f"unparsable at {position}: {listed[position : position + 80]!r}"
        fields.append((match.group(1), match.group(2)))
        position = match.end()
        if position < len(listed):
            assert listed.startswith(", ", position), listed[position : position + 40]
            position += 2
    return fields


def shows(text: str, shown: str, quoted: bool) -> bool:
    """``shown`` is ``text`` in full, or its start and end around one ``…``."""
    inner = shown[1:-1] if quoted else shown

    def decode(part: str) -> str:
        return str(json.loads(f'"{part}"')) if quoted else part

    if "…" not in inner:
        return decode(inner) == text
    head, tail = inner.split("…")
    start, end = decode(head), decode(tail)
    return bool(start and end) and text.startswith(start) and text.endswith(end)


def value_shown(value: Any, shown: str) -> bool:
    if isinstance(value, str):
        quoted = shown.startswith('"')
        if not quoted and (value != value.strip() or any(c in ',:;()[]{}"\\…' for c in value)):
            return False  # punctuation unquoted could forge a field
        return shows(value, shown, quoted)
    if isinstance(value, (dict, list)):
        return shown == json.dumps(value)
    return shows(json.dumps(value), shown, quoted=False)


def label_shown(path: tuple[Any, ...], label: str) -> bool:
    segments = list(SEGMENT.finditer(label))
    assert "".join(m.group(0) for m in segments).removeprefix(".") == label.removeprefix(".")
    keys: list[Any] = list(path)
    if len(keys) > 6:  # the first and last three keys, around a gap
        assert segments[3].group(1) == "…"
        segments = segments[:3] + segments[4:]
        keys = keys[:3] + keys[-3:]
    assert len(segments) == len(keys), (label, path)
    for segment, key in zip(segments, keys, strict=True):
        ident, index, quoted = segment.groups()
        if isinstance(key, int):
            assert index == str(key), (label, path)
        elif quoted is not None:
            assert shows(key, quoted, quoted=True), (label, path)
        else:
            assert ident is not None and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", key), key
            assert shows(key, ident, quoted=False), (label, path)
    return True


def check(question: str, head: str, operation: dict[str, Any], first: list[str]) -> None:
    wanted = expected(operation, first)
    if not wanted:
        assert question == f"Please confirm: {head}."
        return
    assert question.startswith(f"Please confirm: {head} (") and question.endswith(").")
    listed = question[len(f"Please confirm: {head} (") : -2]
    fields = parse(listed)
    assert len(fields) == len(wanted), "every field the digest covers, and no other"
    for (path, value), (label, shown) in zip(wanted, fields, strict=True):
        assert label_shown(path, label)
        assert value_shown(value, shown), (path, value, shown)
    assert len(listed) <= consent.MAX_DETAILS


@settings(max_examples=300, deadline=None)
@given(OPERATIONS, st.data())
def test_every_field_of_any_operation_is_visible_and_the_question_is_bounded(
    operation: dict[str, Any], data: st.DataObject
) -> None:
    keys = list(operation)
    first = data.draw(st.lists(st.sampled_from(keys), max_size=3)) if keys else []
    question = consent.question(HEADLINE, operation, first=first)
    if question is None:
        # Not asked at all (the kernel refuses it): only for an operation with many fields.
        assert consent.details(operation, first) is None
        assert len(expected(operation, first)) * 250 > consent.MAX_DETAILS
        return
    check(question, HEADLINE.rstrip("."), operation, first)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=2000), min_size=1, max_size=40))
def test_a_long_value_never_pushes_another_field_out(values: list[str]) -> None:
    operation: dict[str, Any] = {f"field_{i}": v for i, v in enumerate(values)}
    operation["amount_eur"] = 9800
    question = consent.question(HEADLINE, operation)
    assert question is not None, "40 fields fit at the narrowest elision"
    check(question, HEADLINE.rstrip("."), operation, [])
    assert "amount_eur: 9800" in question


@settings(max_examples=150, deadline=None)
@given(OPERATIONS, st.text(max_size=40))
def test_a_summary_adds_a_headline_and_hides_no_field(
    operation: dict[str, Any], words: str
) -> None:
    operation = {"payee": "ACME", **operation, "amount_eur": 9800}
    template = f"Pay {{amount_eur}} EUR to {{payee}} {words.replace('{', '').replace('}', '')}"
    plain = consent.question(HEADLINE, operation)
    summed = consent.question(HEADLINE, operation, summary=template)
    if plain is None:
        assert summed is None, "a summary never makes a too-large operation askable"
        return
    assert summed is not None and summed.startswith("Please confirm: Pay 9800 EUR to ")
    listed = plain[len(f"Please confirm: {HEADLINE.rstrip('.')}") :]
    assert summed.endswith(listed), "the full field list follows the summary"
