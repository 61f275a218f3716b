"""The one JSON codec every store and the kernel use.

Why one codec: a first run must return exactly what a replay returns, so values are handed back
in their stored form (after the JSON round trip), and every store must refuse the same values.
It refuses ``NaN``/``Infinity`` (not JSON; PostgreSQL ``jsonb`` rejects them), non-string keys
(Python would silently turn ``1`` into ``"1"``), NUL and lone surrogates in strings (PostgreSQL
cannot store them), values nested deeper than a limit (never a bare ``RecursionError``) and
payloads larger than a limit. Tuples are accepted and come back as lists.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from pydantic import JsonValue
from pydantic_core import PydanticSerializationError, to_json

from .errors import ConfigurationError, ErrorCode, SerializationError

__all__ = [
    "DEFAULT_LIMITS",
    "JsonLimits",
    "JsonValue",
    "canonical_json",
    "decode",
    "encode",
    "encode_serialized",
    "encode_stored",
    "fingerprint",
    "round_trip",
]

_BAD_STRING = re.compile(r"[\x00\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """Size and depth limits for one stored document."""

    max_bytes: int = 4 * 1024 * 1024
    max_depth: int = 64

    def __post_init__(self) -> None:
        if self.max_bytes < 16 or self.max_depth < 1:
            raise ConfigurationError(
                "JSON limits must allow at least 16 bytes and depth 1",
                context={"max_bytes": self.max_bytes, "max_depth": self.max_depth},
            )


DEFAULT_LIMITS = JsonLimits()
"""The limits every store applies unless configured otherwise (4 MiB, 64 levels)."""


def _check(value: Any, limits: JsonLimits, what: str) -> None:
    """Walk ``value`` iteratively and refuse anything the codec does not store exactly."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if item is None or isinstance(item, bool | int):
            continue
        if isinstance(item, str):
            if _BAD_STRING.search(item):
                raise SerializationError(
                    f"{what} contains a NUL character or a lone surrogate",
                    context={"what": what, "reason": "bad_string"},
                )
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise SerializationError(
                    f"{what} contains NaN or Infinity, which JSON cannot represent",
                    code=ErrorCode.NON_FINITE_NUMBER,
                    context={"what": what},
                )
            continue
        if isinstance(item, dict | list | tuple):
            if depth > limits.max_depth:
                raise SerializationError(
                    f"{what} is nested deeper than {limits.max_depth} levels",
                    code=ErrorCode.VALUE_TOO_DEEP,
                    context={"what": what, "limit": limits.max_depth},
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise SerializationError(
                            f"{what} has a non-string object key",
                            context={
                                "what": what,
                                "reason": "non_string_key",
                                "type": type(key).__name__,
                            },
                        )
                    stack.append((key, depth + 1))
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
            continue
        raise SerializationError(
            f"{what} contains a value of type {type(item).__name__}, which is not JSON",
            context={"what": what, "reason": "unsupported_type", "type": type(item).__name__},
        )


_STRUCTURE = b'[]{}"'
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in _STRUCTURE)
_DELTA = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _nesting(raw: bytes) -> int:
    """Deepest container nesting of UTF-8 JSON ``raw``, ignoring brackets inside strings."""
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(unescaped.translate(None, _NOT_STRUCTURE).split(b'"')[::2])
    return max(accumulate(map(_DELTA.__getitem__, outside)), default=0)


def _fast_encode(value: Any, limits: JsonLimits, json_shaped: bool) -> tuple[str, Any] | None:
    """Encode in C (or Rust) and verify the result instead of walking ``value`` in Python.

    Returns ``(text, stored form or None)``, or ``None`` when the value needs the precise walk
    (it is refused there, or contains tuples that legitimately come back as lists).
    ``json_shaped`` values (pydantic ``model_dump(mode="json")`` output: string keys, lists)
    skip the round-trip comparison.
    """
    if json_shaped:
        return _fast_encode_shaped(value, limits)
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        raw = text.encode("utf-8")  # lone surrogates fail here
    except (ValueError, TypeError, RecursionError, UnicodeEncodeError):
        return None
    if "\\u0000" in text:
        return None
    if text.count("[") + text.count("{") > limits.max_depth and _nesting(raw) > limits.max_depth:
        return None
    stored = json.loads(text)
    # Equal after the round trip means: string keys only, no tuples, nothing converted.
    return (text, stored) if stored == value else None


def _fast_encode_shaped(value: Any, limits: JsonLimits) -> tuple[str, Any] | None:
    """``_fast_encode`` for JSON-shaped values, serialized by pydantic-core (about 3x faster
    than ``json.dumps`` on checkpoints; same text for JSON-shaped input)."""
    try:
        raw = to_json(value, inf_nan_mode="constants")
    except (PydanticSerializationError, ValueError, TypeError, RecursionError):
        return None
    return None if not _verified(raw, limits) else (raw.decode("utf-8"), None)


def _verified(raw: bytes, limits: JsonLimits) -> bool:
    """Whether pydantic-core's UTF-8 JSON ``raw`` can be stored as is.

    It writes non-finite floats as bare ``NaN``/``Infinity`` tokens when asked (never silently
    as ``null``), so any such substring, even inside a string, sends the value to the precise
    path, which refuses it; so does an escaped NUL, or nesting deeper than the limit.
    """
    if b"NaN" in raw or b"Infinity" in raw or b"\\u0000" in raw:
        return False
    depth_bound = raw.count(b"[") + raw.count(b"{")
    return depth_bound <= limits.max_depth or _nesting(raw) <= limits.max_depth


def encode_serialized(
    raw: bytes, *, limits: JsonLimits = DEFAULT_LIMITS, what: str = "value"
) -> str | None:
    """Accept JSON that pydantic-core serialized with ``inf_nan_mode`` ``constants``.

    Returns the text, or ``None`` when the value must go through ``encode`` instead (it may
    hold NaN, NUL or too deep nesting, and is refused there); too large raises like ``encode``.
    """
    if not _verified(raw, limits):
        return None
    if len(raw) > limits.max_bytes:
        raise SerializationError(
            f"{what} is {len(raw)} bytes, more than the limit of {limits.max_bytes}",
            code=ErrorCode.PAYLOAD_TOO_LARGE,
            context={"what": what, "size": len(raw), "limit": limits.max_bytes},
        )
    return raw.decode("utf-8")


def _encode(
    value: Any, limits: JsonLimits, what: str, json_shaped: bool = False
) -> tuple[str, Any]:
    fast = _fast_encode(value, limits, json_shaped)
    if fast is None:
        _check(value, limits, what)
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        fast = (text, None)
    text = fast[0]
    size = len(text.encode("utf-8"))
    if size > limits.max_bytes:
        raise SerializationError(
            f"{what} is {size} bytes, more than the limit of {limits.max_bytes}",
            code=ErrorCode.PAYLOAD_TOO_LARGE,
            context={"what": what, "size": size, "limit": limits.max_bytes},
        )
    return fast


def encode(
    value: Any,
    *,
    limits: JsonLimits = DEFAULT_LIMITS,
    what: str = "value",
    json_shaped: bool = False,
) -> str:
    """Encode ``value`` as compact JSON text, or raise ``SerializationError``.

    Pass ``json_shaped=True`` only for output of ``model_dump(mode="json")``.
    """
    return _encode(value, limits, what, json_shaped)[0]


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate object key")
    return result


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def decode(text: str | bytes, *, what: str = "value") -> Any:
    """Decode stored JSON; malformed, duplicate-key or non-finite input raises ``INVALID_JSON``."""
    try:
        return json.loads(
            text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant
        )
    except (ValueError, RecursionError, TypeError) as exc:
        raise SerializationError(
            f"{what} is not valid JSON",
            code=ErrorCode.INVALID_JSON,
            context={"what": what, "reason": type(exc).__name__},
        ) from exc


def encode_stored(
    value: Any, *, limits: JsonLimits = DEFAULT_LIMITS, what: str = "value"
) -> tuple[str, Any]:
    """Encode ``value`` and return ``(text, stored form)`` without parsing twice."""
    text, stored = _encode(value, limits, what)
    return text, (json.loads(text) if stored is None else stored)


def round_trip(value: Any, *, limits: JsonLimits = DEFAULT_LIMITS, what: str = "value") -> Any:
    """Return the stored form of ``value``: what a replay will return (a fresh copy)."""
    return encode_stored(value, limits=limits, what=what)[1]


def canonical_json(value: Any, *, limits: JsonLimits = DEFAULT_LIMITS) -> str:
    """Deterministic JSON (sorted keys, no whitespace) for hashing."""
    _check(value, limits, "value")
    return json.dumps(
        value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True
    )


def fingerprint(value: Any) -> str:
    """SHA-256 hex digest of the canonical JSON of ``value``; stable across processes."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
