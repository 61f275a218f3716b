"""What a confirmation question shows: every field of the operation its consent covers.

Why every field: consent is bound to a digest of the validated input (``approval.py``). A
question that cuts the input (a long memo pushing the amount out of view) asks for consent to
something the user never saw. So every leaf of the input is listed by its path (``payee.iban``,
``items[0].sku``), a long value or key is elided in the middle (its start and end stay), no
field is ever dropped, and a string that could pass for punctuation of the list (a memo reading
``x, amount_eur: 1``) or hold invisible or direction-changing characters is shown as a quoted,
escaped JSON string. A literal ``…`` outside the headline only ever marks an elision.

A capability may name its material fields (``consent_fields``, listed first) and give a summary
template (``consent_summary``, the headline instead of its description); neither hides a field.
An operation whose list cannot be shown in ``MAX_DETAILS`` characters, even with the narrowest
elision, is never asked for (``details`` and ``question`` return ``None``): nothing runs without
consent to all of it.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections.abc import Iterable, Iterator, Sequence

from pydantic import JsonValue

__all__ = [
    "MAX_DETAILS",
    "details",
    "question",
    "summary_fields",
]

MAX_DETAILS = 4000
"""Characters the field list of one question may take (the headline comes on top)."""
ELISION = "…"
_WIDTHS = (96, 48, 24)
"""Widths a shown value (and each key of a path) is elided to, tried widest first."""
_DEPTH_SHOWN = 3
"""A path deeper than twice this shows its first and last keys this many each side."""
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_PUNCTUATION = frozenset(',:;()[]{}"\\' + ELISION)
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))
"""Unicode categories escaped in a quoted string: controls, format (bidi overrides, zero-width
characters), surrogates, private and unassigned code points, line and paragraph separators."""

Path = tuple[str | int, ...]


def _leaves(value: JsonValue, path: Path) -> Iterator[tuple[Path, JsonValue]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path, value


def _plain(text: str) -> bool:
    return (
        text != ""
        and text == text.strip()
        and not any(c in _PUNCTUATION or unicodedata.category(c) in _HIDDEN for c in text)
    )


def _escaped(char: str) -> str:
    if char in '"\\':
        return "\\" + char
    if char in "\n\r\t":
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[char]
    if char == ELISION or unicodedata.category(char) in _HIDDEN:
        code = ord(char)
        if code > 0xFFFF:  # a surrogate pair, as JSON writes it
            code -= 0x10000
            return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
        return f"\\u{code:04x}"
    return char


def _elide(units: Sequence[str], width: int) -> str:
    """``units`` (characters, or escapes kept whole) joined, cut in the middle to ``width``.

    The first and the last unit are always kept (an escape is up to 12 characters, so a cut
    value can exceed ``width`` by that much): an elided value always shows how it starts and
    ends."""
    if sum(len(u) for u in units) <= width:
        return "".join(units)
    room = width - len(ELISION)
    head = [units[0]]
    used = len(units[0])
    for unit in units[1:]:
        if used + len(unit) > (room + 1) // 2:
            break
        head.append(unit)
        used += len(unit)
    tail = [units[-1]]
    used += len(units[-1])
    for unit in reversed(units[len(head) : -1]):
        if used + len(unit) > room:
            break
        tail.append(unit)
        used += len(unit)
    return "".join(head) + ELISION + "".join(reversed(tail))


def _text(text: str, width: int) -> str:
    """A string as shown: as is when plain, else a quoted JSON string (quotes always kept)."""
    if _plain(text):
        return _elide(text, width)
    return '"' + _elide([_escaped(c) for c in text], width - 2) + '"'


def _value(value: JsonValue, width: int) -> str:
    if isinstance(value, str):
        return _text(value, width)
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _elide(json.dumps(value), width)


def _key(key: str | int, width: int) -> str:
    if isinstance(key, int):
        return f"[{key}]"
    if _IDENT.fullmatch(key):
        return "." + _elide(key, width)
    if _plain(key):  # e.g. "first name": quoted, as a key always is when not an identifier
        return '["' + _elide(key, width - 2) + '"]'
    return "[" + _text(key, width) + "]"


def _label(path: Path, width: int) -> str:
    if not path:
        return "input"
    keys = [_key(k, width) for k in path]
    if len(keys) > 2 * _DEPTH_SHOWN:
        keys = [*keys[:_DEPTH_SHOWN], "." + ELISION, *keys[-_DEPTH_SHOWN:]]
    return "".join(keys).removeprefix(".")


def _ordered(input_json: JsonValue, first: Sequence[str]) -> Iterator[tuple[Path, JsonValue]]:
    """Every leaf of the input; those of the ``first`` (material) fields come first."""
    if not isinstance(input_json, dict):
        if input_json is not None:
            yield (), input_json
        return
    named = [k for k in dict.fromkeys(first) if k in input_json]
    for key in [*named, *(k for k in input_json if k not in named)]:
        yield from _leaves(input_json[key], (key,))


def details(input_json: JsonValue, first: Sequence[str] = ()) -> str | None:
    """Every field of the operation as ``path: value, ...``, at the widest elision that fits
    ``MAX_DETAILS``; ``None`` when not even the narrowest does (the operation is not asked)."""
    for width in _WIDTHS:
        shown = _listed(_ordered(input_json, first), width, MAX_DETAILS)
        if shown is not None:
            return shown
    return None


def _listed(leaves: Iterable[tuple[Path, JsonValue]], width: int, limit: int) -> str | None:
    """The fields at ``width``; ``None`` as soon as they pass ``limit`` (a huge input is not
    rendered in full only to be refused)."""
    parts: list[str] = []
    used = -2
    for path, value in leaves:
        part = f"{_label(path, width)}: {_value(value, width)}"
        used += len(part) + 2
        if used > limit:
            return None
        parts.append(part)
    return ", ".join(parts)


def summary_fields(template: str) -> list[str]:
    """The field names a summary template uses; ``ValueError`` for anything but ``{name}``
    placeholders (a format spec, a conversion, a positional or an unbalanced brace)."""
    names: list[str] = []
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if not name or name.isdigit() or spec or conversion:
            raise ValueError(f"{{{name}}}: only {{field}} placeholders are allowed")
        names.append(name)
    return names


def _summary(template: str, input_json: JsonValue) -> str:
    fields = input_json if isinstance(input_json, dict) else {}
    parts: list[str] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(literal)
        if name is not None:
            value = fields.get(name)
            if isinstance(value, (dict, list)):
                value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            parts.append(_value(value, _WIDTHS[0]))
    return "".join(parts)


def question(
    headline: str,
    input_json: JsonValue,
    *,
    first: Sequence[str] = (),
    summary: str | None = None,
    kernel: bool = True,
) -> str | None:
    """The question consent is asked with: the kernel's ``Please confirm: <headline or
    summary> (<every field>).``, or (``kernel=False``) a capability's own prompt followed by
    every field; ``None`` when the operation is too large to show (it is not asked)."""
    listed = details(input_json, first)
    if listed is None:
        return None
    if not kernel:
        return f"{headline.rstrip()} ({listed})" if listed else headline
    head = (_summary(summary, input_json) if summary else headline).rstrip().rstrip(".")
    return f"Please confirm: {head} ({listed})." if listed else f"Please confirm: {head}."
