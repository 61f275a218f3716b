"""The one JSON codec every store and the kernel use, for writing and for reading.

Why one codec: a first run must return exactly what a replay returns, so values are handed back
in their stored form (after the JSON round trip), every store must refuse the same values, and
nothing may be written that this library cannot read back. The rule, for every response,
checkpoint, event, effect value, request and reconciled value:

* JSON types only: ``dict`` with ``str`` keys, ``list``, ``str``, ``int``, ``float``, ``bool``,
  ``None``. Tuples are JSON arrays: accepted, stored and handed back as lists. Everything else
  (``set``, ``bytes``, ``datetime``, ``Decimal``, objects ...) is refused, never converted.
* Integers within ``-(2**63 - 1)`` .. ``2**63 - 1`` (``MAX_INTEGER``): what 64-bit readers
  (SQLite, PostgreSQL ``bigint``, most JSON libraries) keep exactly. JavaScript numbers are exact
  only within ``2**53 - 1``: send larger identifiers to such consumers as strings.
* No ``NaN``/``Infinity`` (not JSON; PostgreSQL ``jsonb`` rejects them), no NUL and no lone
  surrogates in strings (PostgreSQL cannot store them), nesting at most ``JsonLimits.max_depth``
  (never a bare ``RecursionError``), documents at most ``JsonLimits.max_bytes``.

Every refusal is a ``SerializationError`` whose context names ``what`` and, for a bad part,
its ``path`` (``$.items[2].name``); reading stored text that is not valid JSON is
``INVALID_JSON``. ``StoredJson`` applies the same rule to the JSON fields of the contract models.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Annotated, Any

from pydantic import JsonValue, ValidationError, ValidationInfo, ValidatorFunctionWrapHandler
from pydantic import WrapValidator as _WrapValidator
from pydantic_core import PydanticSerializationError, from_json, to_json

from ._base_errors import ConfigurationError, ErrorCode, SerializationError

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_INTEGER",
    "JsonLimits",
    "JsonValue",
    "StoredJson",
    "StoredJsonObject",
    "canonical_json",
    "check",
    "decode",
    "encode",
    "encode_serialized",
    "encode_stored",
    "fingerprint",
    "round_trip",
    "stored_json",
]

MAX_INTEGER = 2**63 - 1
"""The largest integer magnitude stored: ``-MAX_INTEGER <= n <= MAX_INTEGER`` (64-bit)."""

_BAD_STRING = re.compile(r"[\x00\ud800-\udfff]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_MAX_PATH = 200
_MAX_DEPTH_LIMIT = 256
# Any integer outside the range has at least 19 digits; a run of 19 digits anywhere in encoded
# text (a string too) sends the value to the precise walk, which decides exactly.
_LONG_RUN = b"9" * len(str(MAX_INTEGER))
_DIGITS_AS_9 = bytes(0x39 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """Size and depth limits for one stored document, and for one turn's outbox events."""

    max_bytes: int = 4 * 1024 * 1024
    max_depth: int = 64
    max_outbox_bytes: int = 8 * 1024 * 1024
    """Total UTF-8 bytes of the outbox events one turn commits (each is also ``max_bytes``
    at most)."""

    def __post_init__(self) -> None:
        if (
            self.max_bytes < 16
            or not 1 <= self.max_depth <= _MAX_DEPTH_LIMIT
            or self.max_outbox_bytes < 16
        ):
            raise ConfigurationError(
                "JSON limits must allow at least 16 bytes, and a depth from 1 to "
                f"{_MAX_DEPTH_LIMIT}",
                context={
                    "max_bytes": self.max_bytes,
                    "max_depth": self.max_depth,
                    "max_outbox_bytes": self.max_outbox_bytes,
                },
            )


DEFAULT_LIMITS = JsonLimits()
"""The limits every store applies unless configured otherwise (4 MiB, 64 levels, 8 MiB of
events per turn)."""

_Path = tuple[Any, str | int] | None
"""A linked path: ``(parent path, key or index)``; ``None`` is the root."""


def _render(path: _Path) -> str:
    steps: list[str] = []
    while path is not None:
        path, step = path
        if isinstance(step, int):
            steps.append(f"[{step}]")
        elif _NAME.fullmatch(step):
            steps.append(f".{step}")
        else:
            steps.append(f"[{json.dumps(step[:64], ensure_ascii=True)}]")
    return ("$" + "".join(reversed(steps)))[:_MAX_PATH]


def _refuse(
    what: str, path: _Path, message: str, code: ErrorCode, **context: Any
) -> SerializationError:
    return SerializationError(
        f"{what} {message}",
        code=code,
        context={"what": what, "path": _render(path), **context},
    )


def _check(value: Any, limits: JsonLimits, what: str) -> None:
    """Walk ``value`` iteratively and refuse anything the codec does not store exactly."""
    stack: list[tuple[Any, int, _Path]] = [(value, 1, None)]
    while stack:
        item, depth, path = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if not -MAX_INTEGER <= item <= MAX_INTEGER:
                raise _refuse(
                    what,
                    path,
                    "contains an integer outside the stored range (at most 2**63 - 1 in size)",
                    ErrorCode.INTEGER_OUT_OF_RANGE,
                    limit=MAX_INTEGER,
                )
            continue
        if isinstance(item, str):
            if _BAD_STRING.search(item):
                raise _refuse(
                    what,
                    path,
                    "contains a NUL character or a lone surrogate",
                    ErrorCode.NOT_SERIALIZABLE,
                    reason="bad_string",
                )
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise _refuse(
                    what,
                    path,
                    "contains NaN or Infinity, which JSON cannot represent",
                    ErrorCode.NON_FINITE_NUMBER,
                )
            continue
        if isinstance(item, dict | list | tuple):
            if depth > limits.max_depth:
                raise _refuse(
                    what,
                    path,
                    f"is nested deeper than {limits.max_depth} levels",
                    ErrorCode.VALUE_TOO_DEEP,
                    limit=limits.max_depth,
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise _refuse(
                            what,
                            path,
                            "has a non-string object key",
                            ErrorCode.NOT_SERIALIZABLE,
                            reason="non_string_key",
                            type=type(key).__name__,
                        )
                    if _BAD_STRING.search(key):
                        raise _refuse(
                            what,
                            (path, key),
                            "has an object key with a NUL character or a lone surrogate",
                            ErrorCode.NOT_SERIALIZABLE,
                            reason="bad_string",
                        )
                    stack.append((child, depth + 1, (path, key)))
            else:
                stack.extend((child, depth + 1, (path, n)) for n, child in enumerate(item))
            continue
        raise _refuse(
            what,
            path,
            f"contains a value of type {type(item).__name__}, which is not JSON",
            ErrorCode.NOT_SERIALIZABLE,
            reason="unsupported_type",
            type=type(item).__name__,
        )


_STRUCTURE = b'[]{}"'
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in _STRUCTURE)
_DELTA = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _nesting(raw: bytes) -> int:
    """Deepest container nesting of UTF-8 JSON ``raw``, ignoring brackets inside strings."""
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(unescaped.translate(None, _NOT_STRUCTURE).split(b'"')[::2])
    return max(accumulate(map(_DELTA.__getitem__, outside)), default=0)


def _long_digits(raw: bytes) -> bool:
    """Whether ``raw`` has a run of digits long enough to be an out-of-range integer."""
    return _LONG_RUN in raw.translate(_DIGITS_AS_9)


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
    if "\\u0000" in text or _long_digits(raw):
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
    path, which refuses it; so does an escaped NUL, a long run of digits (maybe an integer out
    of range) or nesting deeper than the limit.
    """
    # A one-byte search (memchr) is ~20x faster than a longer one: look for a token's first
    # byte before the token.
    if (
        (b"N" in raw and b"NaN" in raw)
        or (b"I" in raw and b"Infinity" in raw)
        or (b"\\" in raw and b"\\u0000" in raw)
        or _long_digits(raw)
    ):
        return False
    depth_bound = raw.count(b"[") + raw.count(b"{")
    return depth_bound <= limits.max_depth or _nesting(raw) <= limits.max_depth


def _too_large(what: str, size: int, limit: int) -> SerializationError:
    return SerializationError(
        f"{what} is {size} bytes, more than the limit of {limit}",
        code=ErrorCode.PAYLOAD_TOO_LARGE,
        context={"what": what, "size": size, "limit": limit},
    )


def encode_serialized(
    raw: bytes, *, limits: JsonLimits = DEFAULT_LIMITS, what: str = "value"
) -> str | None:
    """Accept JSON that pydantic-core serialized with ``inf_nan_mode`` ``constants``.

    Returns the text, or ``None`` when the value must go through ``encode`` instead (it may
    hold NaN, NUL, an integer out of range or too deep nesting, and is refused there); too
    large raises like ``encode``.
    """
    if not _verified(raw, limits):
        return None
    if len(raw) > limits.max_bytes:
        raise _too_large(what, len(raw), limits.max_bytes)
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
        raise _too_large(what, size, limits.max_bytes)
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


def check(value: Any, *, limits: JsonLimits = DEFAULT_LIMITS, what: str = "value") -> None:
    """Refuse ``value`` exactly as ``encode`` would (it is not kept)."""
    if not _passes(value, limits):
        _encode(value, limits, what)


def _passes(value: Any, limits: JsonLimits) -> bool:
    """The common case of ``check`` in Rust, about twice as fast: pydantic-core serializes and
    parses ``value``, and equality with the original proves nothing was converted (a non-string
    key, a set, a date, bytes, a tuple all come back different). The bytes are verified as
    ``encode_model``'s are, and only a value well under the size limit passes here (the
    serializers format some floats differently); anything else takes ``encode``'s path, which
    accepts it or raises the precise error."""
    try:
        raw = to_json(value, inf_nan_mode="constants")
    except (PydanticSerializationError, ValueError, TypeError, RecursionError):
        return False
    if len(raw) > limits.max_bytes // 2 or not _verified(raw, limits):
        return False
    try:
        return bool(from_json(raw) == value)
    except Exception:  # a comparison the value's own type refuses: the precise path decides
        return False


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate object key")
    return result


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def decode(text: str | bytes, *, what: str = "value") -> Any:
    """Decode stored JSON; malformed, duplicate-key or non-finite input raises ``INVALID_JSON``
    (so does an integer too long for Python to read, which ``encode`` never writes)."""
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


def fingerprint(value: Any, *, limits: JsonLimits = DEFAULT_LIMITS) -> str:
    """SHA-256 hex digest of the canonical JSON of ``value``; stable across processes."""
    return hashlib.sha256(canonical_json(value, limits=limits).encode("utf-8")).hexdigest()


_MODEL_LIMITS = JsonLimits(max_bytes=2**62, max_depth=_MAX_DEPTH_LIMIT)
"""A model holds what its store may refuse for size or depth; the store decides at write."""


def stored_json(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
    """Pydantic's JSON check first (fast); on failure the codec's rule, with its typed error.

    A value pydantic refuses only for its tuples is accepted in its stored form (lists).
    """
    try:
        return handler(value)
    except ValidationError:
        stored = round_trip(value, limits=_MODEL_LIMITS, what=info.field_name or "value")
    return handler(stored)


StoredJson = Annotated[JsonValue, _WrapValidator(stored_json)]
"""A JSON value field of a contract model: refused with ``SerializationError`` (and its path)
when it is not JSON, tuples kept as lists."""

StoredJsonObject = Annotated[dict[str, JsonValue], _WrapValidator(stored_json)]
"""A JSON object field of a contract model, under the same rule as ``StoredJson``."""
