"""Encoding and decoding of stored documents, shared by every adapter.

Writing goes through the one codec (limits, NaN, depth); reading turns anything unreadable into
``CheckpointCorruptError`` naming the document, never a silent reset or a bare driver error.

Store-wide listings must not fail for every thread because of one corrupt row: they report the
row with a placeholder built from its columns (``unreadable_event``, ``unreadable_receipt``) or
a reason (``head_problem``) and carry on; reads of that one document still raise.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, SchemaSerializer, core_schema

from ..contracts import codec
from ..contracts.codec import DEFAULT_LIMITS, JsonLimits
from ..contracts.errors import (
    CheckpointCorruptError,
    ErrorCode,
    SerializationError,
    TurnConflictError,
)
from ..contracts.events import KernelEvent
from ..contracts.receipts import EffectReceipt, ReceiptStatus
from ..contracts.turns import DurableTurnResult

__all__ = [
    "ENVELOPE_BYTES",
    "ENVELOPE_DEPTH",
    "MAX_DOCUMENT_DEPTH",
    "PRUNED_TURN",
    "UNREADABLE_EVENT_TYPE",
    "OwnTexts",
    "decode_model",
    "decode_own_model",
    "decode_turn",
    "decode_value",
    "encode_model",
    "head_problem",
    "is_pruned",
    "unreadable",
    "unreadable_event",
    "unreadable_receipt",
]

ENVELOPE_BYTES = 64 * 1024
ENVELOPE_DEPTH = 8
MAX_DOCUMENT_DEPTH = 256
"""A stored document wraps the values a caller gives (a receipt around an effect value, a turn
result around a response and a checkpoint): the limits apply to each value, and a document may
exceed them by this envelope, so a value the codec accepted is never refused later, inside its
receipt or checkpoint (after the provider call)."""

UNREADABLE_EVENT_TYPE = "ik.unreadable"
"""The ``type`` of the placeholder listed for an outbox row that cannot be read back."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

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


_ENVELOPES: dict[JsonLimits, JsonLimits] = {}


def _envelope(limits: JsonLimits) -> JsonLimits:
    """The limits of a document wrapping values under ``limits`` (cached: a store has one or
    two, and ``dataclasses.replace`` is slow enough to show in every commit)."""
    found = _ENVELOPES.get(limits)
    if found is None:
        found = replace(
            limits,
            max_bytes=limits.max_bytes + ENVELOPE_BYTES,
            max_depth=min(limits.max_depth + ENVELOPE_DEPTH, MAX_DOCUMENT_DEPTH),
        )
        if len(_ENVELOPES) < 64:
            _ENVELOPES[limits] = found
    return found


def encode_model(model: BaseModel, *, limits: JsonLimits = DEFAULT_LIMITS, what: str) -> str:
    """The model's JSON text, serialized in one pass by pydantic-core when the codec can verify
    the bytes, otherwise by ``model_dump(mode="json")`` and the codec's precise path.

    A field holding a value of another type than declared (possible only without validation,
    ``model_construct``) is refused, never converted; so is anything pydantic cannot serialize
    (``SerializationError``, never a pydantic or Unicode error).
    """
    value_limits, limits = limits, _envelope(limits)
    try:
        raw = _serializer(type(model)).to_json(model, warnings="error")
    except Exception:  # anything unusual takes the precise path, which reports it
        raw = None
    if raw is not None:
        text = codec.encode_serialized(raw, limits=limits, what=what)
        if text is not None:
            return text
    _check_json_fields(model, value_limits, what)
    try:
        shaped = model.model_dump(mode="json", warnings="error")
    except (PydanticSerializationError, ValueError, TypeError, RecursionError) as exc:
        raise SerializationError(
            f"{what} holds a value that is not of its declared type or not JSON",
            context={"what": what, "reason": type(exc).__name__},
        ) from exc
    return codec.encode(shaped, limits=limits, what=what, json_shaped=True)


_JSON_FIELDS: dict[type[BaseModel], tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _fields(cls: type[BaseModel]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(JSON value fields, other fields)`` of a contract model (cached)."""
    found = _JSON_FIELDS.get(cls)
    if found is None:
        json_fields: list[str] = []
        others: list[str] = []
        for name, info in cls.model_fields.items():
            is_json = any(getattr(m, "func", None) is codec.stored_json for m in info.metadata)
            (json_fields if is_json else others).append(name)
        found = _JSON_FIELDS[cls] = (tuple(json_fields), tuple(others))
    return found


def _check_json_fields(model: BaseModel, limits: JsonLimits, what: str) -> None:
    """The codec's precise rule on every JSON value field of ``model`` and its sub-models: the
    path to a value pydantic's JSON output would have changed (a lone surrogate in an object
    key becomes U+FFFD there) rather than refused."""
    json_fields, others = _fields(type(model))
    for name in json_fields:
        codec.check(getattr(model, name), limits=limits, what=f"{what}: {name}")
    for name in others:
        value = getattr(model, name)
        for item in value if isinstance(value, list | tuple) else (value,):
            if isinstance(item, BaseModel):
                _check_json_fields(item, limits, what)


def decode_model(cls: type[M], text: str | bytes, *, what: str, **context: Any) -> M:
    try:
        return cls.model_validate(codec.decode(text, what=what))
    except (SerializationError, ValidationError) as exc:
        raise CheckpointCorruptError(
            f"stored {what} cannot be read back",
            context={"what": what, **context},
        ) from exc


def decode_own_model(cls: type[M], text: str | bytes, *, what: str, **context: Any) -> M:
    """``decode_model`` for text the caller has proven, by comparing it in full with the
    stored bytes, to be this process's own ``encode_model`` output.

    The codec's encoder never writes duplicate keys or non-finite numbers, so the refusals of
    ``codec.decode`` cannot trigger on such text, and pydantic validates the JSON directly
    (the same model as ``model_validate(json.loads(text))``, without the per-value Python
    callbacks of ``JsonValue`` validation). Any other text must go through ``decode_model``.
    """
    try:
        return cls.model_validate_json(text)
    except (SerializationError, ValidationError) as exc:
        raise CheckpointCorruptError(
            f"stored {what} cannot be read back",
            context={"what": what, **context},
        ) from exc


class OwnTexts:
    """Per thread, the turn result text this process last committed (as UTF-8), within a bound
    of ``max_bytes`` (the least recently committed threads go first; a larger text is not kept).

    A stored head equal to it was written by this process's own ``encode_model``, so it may be
    read with ``decode_own_model``: the same model, several times cheaper than ``decode_model``.
    Any other text (another process's commit, a corrupt row) takes the checked path.
    """

    __slots__ = ("_size", "_texts", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._texts: dict[str, bytes] = {}
        self._size = 0

    def remember(self, thread_id: str, text: bytes) -> None:
        texts = self._texts
        old = texts.pop(thread_id, None)
        if old is not None:
            self._size -= len(old)
        if len(text) > self.max_bytes:
            return
        self._size += len(text)
        while self._size > self.max_bytes:
            self._size -= len(texts.pop(next(iter(texts))))
        texts[thread_id] = text

    def is_own(self, thread_id: str, text: bytes) -> bool:
        return self._texts.get(thread_id) == text


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


def unreadable(exc: CheckpointCorruptError) -> str:
    """The reason kept for a row that cannot be read back (safe: no stored content)."""
    return f"unreadable: {exc.message}"


def unreadable_event(
    *,
    position: int,
    thread_id: str,
    turn_id: str,
    sequence: int,
    reason: str,
    event_id: str | None = None,
) -> KernelEvent:
    """A placeholder for an outbox row that cannot be read back, from the row's own columns."""
    return KernelEvent(
        id=event_id or f"unreadable-{position}",
        type=UNREADABLE_EVENT_TYPE,
        occurred_at=_EPOCH,
        thread_id=thread_id,
        turn_id=turn_id,
        sequence=max(0, sequence),
        correlation_id="",
        data={"reason": reason},
    )


def unreadable_receipt(
    *,
    thread_id: str,
    idempotency_key: str,
    reason: str,
    status: ReceiptStatus = ReceiptStatus.UNCERTAIN,
    receipt_id: str = "unreadable",
    capability_id: str = "unknown",
    updated_at: datetime = _EPOCH,
) -> EffectReceipt:
    """A placeholder for a receipt row that cannot be read back, from the row's own columns
    (listed so an operator sees it; reading or reconciling that key still raises)."""
    return EffectReceipt(
        id=receipt_id,
        thread_id=thread_id,
        idempotency_key=idempotency_key,
        capability_id=capability_id,
        turn_id="unknown",
        status=status,
        error=reason,
        attempts=1,
        created_at=updated_at,
        updated_at=updated_at,
    )


def head_problem(*, missing: bool, valid: bool, fingerprint: object) -> str | None:
    """Why a thread's head checkpoint cannot be read back, from what a listing query sees:
    its turn row is missing, its text is not JSON, or it has no agent fingerprint."""
    if missing:
        return "unreadable: the thread's head points at a missing turn"
    if not valid:
        return "unreadable: the head checkpoint is not valid JSON"
    if not isinstance(fingerprint, str):
        return "unreadable: the head checkpoint has no agent fingerprint"
    return None
