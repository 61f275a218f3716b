"""Checks of the arguments every store method takes, written once for every adapter.

The engine runs them before it checks that the store is open and before any storage call, so
a bad argument gets the same ``InvalidInputError`` from every store and nothing is written.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from ..contracts.errors import InvalidInputError
from ..contracts.ids import validate_id, validate_thread_id, validate_turn_id
from ..contracts.receipts import ReceiptStatus

__all__ = [
    "MAX_ERROR_LENGTH",
    "MAX_FINGERPRINTS",
    "check_cutoff",
    "check_fingerprints",
    "check_flag",
    "check_limit",
    "check_optional_flag",
    "check_optional_thread_id",
    "check_optional_turn_id",
    "check_position",
    "check_positions",
    "check_relay_id",
    "check_revision",
    "check_seconds",
    "check_status",
    "check_text",
]

MAX_ERROR_LENGTH = 2000
"""A delivery error is kept up to this many characters."""

MAX_FINGERPRINTS = 100
"""``list_threads(fingerprint_not_in=...)`` takes at most this many fingerprints: the set is
sent with every page query."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_limit(limit: Any, *, maximum: int = 1000) -> int:
    if not _is_int(limit) or not 1 <= limit <= maximum:
        raise InvalidInputError(
            f"limit must be an integer from 1 to {maximum}", context={"field": "limit"}
        )
    return int(limit)


def check_revision(value: Any, name: str) -> int:
    """A position or revision cursor: an integer >= 0."""
    if not _is_int(value) or value < 0:
        raise InvalidInputError(f"{name} must be an integer >= 0", context={"field": name})
    return int(value)


def check_position(value: Any) -> int:
    if not _is_int(value) or value < 1:
        raise InvalidInputError("position must be an integer >= 1", context={"field": "position"})
    return int(value)


def check_positions(positions: Any) -> list[int]:
    """Distinct outbox positions in ascending order."""
    if isinstance(positions, str | bytes) or not isinstance(positions, Sequence):
        raise InvalidInputError(
            "positions must be a sequence of integers", context={"field": "positions"}
        )
    return sorted({check_position(p) for p in positions})


def check_seconds(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 10**9:
        raise InvalidInputError(f"{name} must be a number of seconds >= 0", context={"field": name})
    return float(value)


def check_relay_id(relay_id: Any) -> str:
    return validate_id(relay_id, "relay_id")


def check_optional_thread_id(thread_id: Any) -> str | None:
    return None if thread_id is None else validate_thread_id(thread_id)


def check_optional_turn_id(turn_id: Any) -> str | None:
    return None if turn_id is None else validate_turn_id(turn_id)


def check_status(status: Any) -> ReceiptStatus | None:
    if status is None:
        return None
    try:
        return ReceiptStatus(status)
    except ValueError:
        raise InvalidInputError(
            "status must be a receipt status",
            context={"field": "status", "allowed": [s.value for s in ReceiptStatus]},
        ) from None


def check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False", context={"field": name})
    return value


def check_optional_flag(value: Any, name: str) -> bool | None:
    """A filter that is on (``True``), inverted (``False``) or off (``None``)."""
    return None if value is None else check_flag(value, name)


def check_fingerprints(value: Any) -> frozenset[str] | None:
    """``fingerprint_not_in``: a bounded collection of agent fingerprints (text)."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Collection):
        raise InvalidInputError(
            "fingerprint_not_in must be a collection of strings",
            context={"field": "fingerprint_not_in"},
        )
    if len(value) > MAX_FINGERPRINTS:
        raise InvalidInputError(
            f"fingerprint_not_in takes at most {MAX_FINGERPRINTS} fingerprints",
            context={"field": "fingerprint_not_in", "maximum": MAX_FINGERPRINTS},
        )
    for item in value:
        if not isinstance(item, str) or len(item) > 4096:
            raise InvalidInputError(
                "fingerprint_not_in must hold strings of at most 4096 characters",
                context={"field": "fingerprint_not_in"},
            )
    return frozenset(value)


def check_text(value: Any, name: str, *, maximum: int) -> str:
    """Free text kept for the record, cut to ``maximum`` characters."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be text", context={"field": name})
    return value[:maximum]


def check_cutoff(value: Any) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidInputError(
            "older_than must be a timezone-aware datetime", context={"field": "older_than"}
        )
    return value
