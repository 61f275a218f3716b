"""Identifier validation and generation.

Identifiers are compared as exact strings (no Unicode normalization). They are refused when
they are not ``str``, blank (only whitespace), too long, or contain a character an operator
cannot see or that changes how the id is displayed: Unicode categories ``Cc`` (controls, NUL
included: PostgreSQL cannot store NUL and SQLite can, so accepting it would make stores
disagree), ``Cf`` (format: zero-width characters, bidi overrides, BOM), ``Zl``/``Zp`` (line and
paragraph separators) and ``Cs`` (lone surrogates). So ``"\u200b"`` and ``"t\u202ex"`` are
refused like ``"\u00a0"``; visible non-ASCII letters are fine.
"""

from __future__ import annotations

import os
import re
import time
import unicodedata
from typing import Any

from ._base_errors import ErrorCode, InvalidIdError

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_KEY_LENGTH",
    "new_id",
    "validate_capability_id",
    "validate_id",
    "validate_idempotency_key",
    "validate_step_id",
    "validate_thread_id",
    "validate_turn_id",
]

MAX_ID_LENGTH = 256
MAX_KEY_LENGTH = 512

_FORBIDDEN_ASCII = re.compile(r"[\x00-\x1f\x7f]")
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _forbidden(value: str) -> bool:
    """Whether ``value`` has an invisible or display-changing character (module docstring)."""
    if value.isascii():
        return _FORBIDDEN_ASCII.search(value) is not None
    return any(unicodedata.category(ch) in _FORBIDDEN_CATEGORIES for ch in value)


def validate_id(
    value: Any,
    field: str,
    *,
    code: ErrorCode = ErrorCode.INVALID_ID,
    max_length: int = MAX_ID_LENGTH,
) -> str:
    """Return ``value`` unchanged if it is a valid identifier, else raise ``InvalidIdError``."""
    if not isinstance(value, str):
        raise InvalidIdError(
            f"{field} must be a string",
            code=code,
            context={"field": field, "reason": "not_a_string", "type": type(value).__name__},
        )
    if not value.strip():
        raise InvalidIdError(
            f"{field} must not be empty or blank",
            code=code,
            context={"field": field, "reason": "blank"},
        )
    if len(value) > max_length:
        raise InvalidIdError(
            f"{field} is longer than {max_length} characters",
            code=code,
            context={
                "field": field,
                "reason": "too_long",
                "limit": max_length,
                "length": len(value),
            },
        )
    if _forbidden(value):
        raise InvalidIdError(
            f"{field} contains control, format (zero-width, bidi) or separator characters,"
            " NUL or lone surrogates",
            code=code,
            context={"field": field, "reason": "forbidden_character"},
        )
    return value


def validate_thread_id(value: Any) -> str:
    return validate_id(value, "thread_id", code=ErrorCode.INVALID_THREAD_ID)


def validate_turn_id(value: Any) -> str:
    return validate_id(value, "turn_id", code=ErrorCode.INVALID_TURN_ID)


def validate_idempotency_key(value: Any) -> str:
    """The full ledger key, at most ``MAX_KEY_LENGTH`` characters: the kernel's prefix
    (``capability_id:``) counts toward the limit, so a capability's own key part gets 512
    minus the prefix."""
    return validate_id(
        value, "idempotency_key", code=ErrorCode.INVALID_IDEMPOTENCY_KEY, max_length=MAX_KEY_LENGTH
    )


def validate_capability_id(value: Any) -> str:
    return validate_id(value, "capability_id", code=ErrorCode.INVALID_CAPABILITY_ID)


def validate_step_id(value: Any) -> str:
    return validate_id(value, "step_id", code=ErrorCode.INVALID_STEP_ID)


def new_id(prefix: str) -> str:
    """A time-ordered unique id: ``prefix_`` + 12 hex digits of ms time + 16 random hex digits.

    Sorting ids of one prefix as strings sorts them by creation time (to the millisecond).
    """
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{os.urandom(8).hex()}"
