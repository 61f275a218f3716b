"""Encoding and decoding of stored documents, shared by every adapter.

Writing goes through the one codec (limits, NaN, depth); reading turns anything unreadable into
``CheckpointCorruptError`` naming the document, never a silent reset or a bare driver error.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import SchemaSerializer, core_schema

from ..contracts import codec
from ..contracts.codec import DEFAULT_LIMITS, JsonLimits
from ..contracts.errors import (
    CheckpointCorruptError,
    ErrorCode,
    SerializationError,
    TurnConflictError,
)
from ..contracts.turns import DurableTurnResult

__all__ = [
    "PRUNED_TURN",
    "decode_model",
    "decode_own_model",
    "decode_turn",
    "decode_value",
    "encode_model",
    "is_pruned",
]

PRUNED_TURN = '{"pruned":true}'
"""What retention leaves in a pruned turn's result: the row stays, so the turn id is never run
again, but its result is gone (a retry gets ``TURN_EXPIRED``)."""

M = TypeVar("M", bound=BaseModel)


_SERIALIZERS: dict[type[BaseModel], SchemaSerializer] = {}
_NON_FINITE_AS_TOKENS = core_schema.CoreConfig(ser_json_inf_nan="constants")


def _serializer(cls: type[BaseModel]) -> SchemaSerializer:
    """The model's own serializer, except that NaN/Infinity are written as tokens (which the
    codec then refuses) instead of the default silent ``null``."""
    serializer = _SERIALIZERS.get(cls)
    if serializer is None:
        serializer = SchemaSerializer(cls.__pydantic_core_schema__, _NON_FINITE_AS_TOKENS)
        _SERIALIZERS[cls] = serializer
    return serializer


def encode_model(model: BaseModel, *, limits: JsonLimits = DEFAULT_LIMITS, what: str) -> str:
    """The model's JSON text, serialized in one pass by pydantic-core when the codec can verify
    the bytes, otherwise by ``model_dump(mode="json")`` and the codec's precise path."""
    try:
        raw = _serializer(type(model)).to_json(model)
    except Exception:  # anything unusual takes the precise path, which reports it
        raw = None
    if raw is not None:
        text = codec.encode_serialized(raw, limits=limits, what=what)
        if text is not None:
            return text
    return codec.encode(model.model_dump(mode="json"), limits=limits, what=what, json_shaped=True)


def decode_model(cls: type[M], text: str | bytes, *, what: str, **context: Any) -> M:
    try:
        return cls.model_validate(codec.decode(text, what=what))
    except (SerializationError, ValidationError) as exc:
        raise CheckpointCorruptError(
            f"stored {what} cannot be read back",
            context={"what": what, **context},
        ) from exc


def decode_own_model(cls: type[M], text: str, *, what: str, **context: Any) -> M:
    """``decode_model`` for text the caller has proven, by comparing it in full with the
    stored bytes, to be this process's own ``encode_model`` output.

    The codec's encoder never writes duplicate keys or non-finite numbers, so the refusals of
    ``codec.decode`` cannot trigger on such text, and pydantic validates the JSON directly
    (the same model as ``model_validate(json.loads(text))``, without the per-value Python
    callbacks of ``JsonValue`` validation). Any other text must go through ``decode_model``.
    """
    try:
        return cls.model_validate_json(text)
    except ValidationError as exc:
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


def is_pruned(text: str | bytes) -> bool:
    return (text.decode() if isinstance(text, bytes) else text).replace(" ", "") == PRUNED_TURN


def decode_turn(text: str | bytes, *, thread_id: str, turn_id: str) -> DurableTurnResult:
    """A stored turn result; a pruned one raises ``TURN_EXPIRED`` (never re-executed)."""
    if is_pruned(text):
        raise TurnConflictError(
            "this turn was committed, but its stored result was removed by retention",
            code=ErrorCode.TURN_EXPIRED,
            context={"thread_id": thread_id, "turn_id": turn_id},
        )
    return decode_model(
        DurableTurnResult, text, what="turn result", thread_id=thread_id, turn_id=turn_id
    )
