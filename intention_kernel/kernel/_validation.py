"""Checks on what callers hand to ``CompiledAgent.run``: typed errors, nothing written."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue

from ..contracts import codec
from ..contracts.codec import JsonLimits
from ..contracts.errors import ErrorCode, InvalidInputError, KernelError
from ._limits import KernelLimits

__all__ = ["validate_host_context", "validate_selection", "validate_text", "validate_timeout"]

_BAD_TEXT = re.compile(r"[\x00\ud800-\udfff]")


def validate_text(text: Any, limits: KernelLimits, has_selection: bool) -> str:
    if not isinstance(text, str):
        raise InvalidInputError(
            "text must be a string",
            code=ErrorCode.INVALID_TEXT,
            context={"field": "text", "type": type(text).__name__},
        )
    if len(text) > limits.max_text_length:
        raise InvalidInputError(
            f"text is longer than {limits.max_text_length} characters",
            code=ErrorCode.INVALID_TEXT,
            context={"field": "text", "limit": limits.max_text_length, "length": len(text)},
        )
    if _BAD_TEXT.search(text):
        raise InvalidInputError(
            "text contains a NUL character or a lone surrogate",
            code=ErrorCode.INVALID_TEXT,
            context={"field": "text"},
        )
    if not text.strip() and not has_selection:
        raise InvalidInputError(
            "text must not be blank unless a selection is given",
            code=ErrorCode.INVALID_TEXT,
            context={"field": "text"},
        )
    return text


def validate_selection(selection: Any, limits: KernelLimits) -> dict[str, JsonValue] | None:
    """A selection is a JSON object (e.g. ``{"interaction_id": ..., "option": ...}``)."""
    if selection is None:
        return None
    if not isinstance(selection, Mapping) or not all(isinstance(k, str) for k in selection):
        raise InvalidInputError(
            "selection must be a JSON object with string keys",
            code=ErrorCode.INVALID_SELECTION,
            context={"field": "selection"},
        )
    try:
        stored: dict[str, JsonValue] = codec.round_trip(
            dict(selection),
            limits=JsonLimits(max_bytes=limits.max_selection_bytes, max_depth=16),
            what="selection",
        )
    except KernelError as exc:
        raise InvalidInputError(
            "selection is not a small JSON object",
            code=ErrorCode.INVALID_SELECTION,
            context={"field": "selection", "reason": str(exc.code)},
        ) from exc
    return stored


ACTOR_LIMITS = JsonLimits(max_bytes=1024, max_depth=1)
"""An actor (text) is copied into every approval record the checkpoint keeps: it must be short."""


def validate_host_context(host_context: Any) -> Mapping[str, Any]:
    """The host's own values pass through unchecked; what the kernel records from them (the
    ``actor``, when it is text) must be storable, so a turn never fails at commit after a write.
    """
    if host_context is None:
        return {}
    if not isinstance(host_context, Mapping):
        raise InvalidInputError("host_context must be a mapping", context={"field": "host_context"})
    actor = host_context.get("actor")
    if isinstance(actor, str):
        try:
            codec.encode(actor, limits=ACTOR_LIMITS, what="host_context.actor")
        except KernelError as exc:
            raise InvalidInputError(
                "host_context.actor cannot be recorded",
                context={"field": "host_context.actor", "reason": str(exc.code)},
            ) from exc
    return host_context


def validate_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise InvalidInputError(
            "timeout must be a positive number of seconds", context={"field": "timeout"}
        )
    return float(timeout)
