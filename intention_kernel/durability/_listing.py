"""Validation of paging arguments shared by every adapter's read methods."""

from __future__ import annotations

from typing import Any

from ..contracts.errors import InvalidInputError

__all__ = ["check_limit"]


def check_limit(limit: Any, *, maximum: int = 1000) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= maximum:
        raise InvalidInputError(
            f"limit must be an integer from 1 to {maximum}", context={"field": "limit"}
        )
    return limit
