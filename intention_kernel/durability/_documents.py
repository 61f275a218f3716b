"""Encoding and decoding of stored documents, shared by every adapter.

Writing goes through the one codec (limits, NaN, depth); reading turns anything unreadable into
``CheckpointCorruptError`` naming the document, never a silent reset or a bare driver error.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..contracts import codec
from ..contracts.codec import DEFAULT_LIMITS, JsonLimits
from ..contracts.errors import CheckpointCorruptError, SerializationError

__all__ = ["decode_model", "decode_value", "encode_model"]

M = TypeVar("M", bound=BaseModel)


def encode_model(model: BaseModel, *, limits: JsonLimits = DEFAULT_LIMITS, what: str) -> str:
    return codec.encode(model.model_dump(mode="json"), limits=limits, what=what)


def decode_model(cls: type[M], text: str | bytes, *, what: str, **context: Any) -> M:
    try:
        return cls.model_validate(codec.decode(text, what=what))
    except (SerializationError, ValidationError) as exc:
        raise CheckpointCorruptError(
            f"stored {what} cannot be read back",
            context={"what": what, **context},
        ) from exc


def decode_value(text: str | bytes | None, *, what: str, **context: Any) -> Any:
    if text is None:
        return None
    try:
        return codec.decode(text, what=what)
    except SerializationError as exc:
        raise CheckpointCorruptError(
            f"stored {what} cannot be read back", context={"what": what, **context}
        ) from exc
