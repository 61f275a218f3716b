"""Pure turn rules shared by every adapter: fingerprints, commit checks, revision CAS."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..contracts import codec
from ..contracts.codec import DEFAULT_LIMITS, JsonLimits
from ..contracts.errors import ErrorCode, InvalidInputError, SerializationError, TurnConflictError
from ..contracts.events import KernelEvent, check_event_type
from ..contracts.ids import validate_id
from ..contracts.turns import DurableTurnResult

__all__ = [
    "MAX_FINGERPRINT_LENGTH",
    "MAX_PROGRESS_ITEMS",
    "MAX_SEQUENCE",
    "already_committed",
    "check_fingerprint",
    "check_outbox",
    "check_outbox_size",
    "check_progress",
    "check_result",
    "check_revision",
    "validate_fingerprint",
]

MAX_FINGERPRINT_LENGTH = 256
MAX_SEQUENCE = 2**31 - 1
"""The largest event ``sequence`` every store keeps (PostgreSQL stores it as ``integer``)."""


def validate_fingerprint(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_FINGERPRINT_LENGTH:
        raise InvalidInputError(
            f"request_fingerprint must be a non-empty string of at most "
            f"{MAX_FINGERPRINT_LENGTH} characters",
            context={"field": "request_fingerprint"},
        )
    return value


def check_fingerprint(
    stored: str | None, requested: str | None, *, thread_id: str, turn_id: str
) -> None:
    """Same turn id with a different request is a caller bug, never a silent replay."""
    if stored is not None and requested is not None and stored != requested:
        raise TurnConflictError(
            "this turn id was already used for a different request",
            code=ErrorCode.TURN_ID_REUSED,
            context={"thread_id": thread_id, "turn_id": turn_id},
        )


def already_committed(thread_id: str, turn_id: str) -> TurnConflictError:
    return TurnConflictError(
        "this turn is already committed",
        code=ErrorCode.TURN_ALREADY_COMMITTED,
        context={"thread_id": thread_id, "turn_id": turn_id},
    )


def check_revision(loaded: int, stored: int, *, thread_id: str) -> None:
    """Compare-and-set: the store must still hold the revision this turn loaded."""
    if loaded != stored:
        raise TurnConflictError(
            "the thread's checkpoint changed since this turn loaded it",
            code=ErrorCode.CHECKPOINT_REVISION_CONFLICT,
            context={"thread_id": thread_id, "loaded_revision": loaded, "stored_revision": stored},
        )


def check_result(
    result: Any, *, thread_id: str, turn_id: str, loaded_revision: int
) -> DurableTurnResult:
    """The result must be for this scope's turn and carry the next revision."""
    if not isinstance(result, DurableTurnResult):
        raise InvalidInputError(
            "commit needs a DurableTurnResult",
            context={"type": type(result).__name__},
        )
    if result.thread_id != thread_id or result.turn_id != turn_id:
        raise InvalidInputError(
            "the result belongs to another thread or turn",
            code=ErrorCode.TURN_RESULT_MISMATCH,
            context={"thread_id": thread_id, "turn_id": turn_id},
        )
    if result.checkpoint.revision != loaded_revision + 1:
        raise TurnConflictError(
            "the successor checkpoint must have the loaded revision + 1",
            code=ErrorCode.CHECKPOINT_REVISION_CONFLICT,
            context={
                "thread_id": thread_id,
                "loaded_revision": loaded_revision,
                "successor_revision": result.checkpoint.revision,
            },
        )
    return result


def check_outbox(
    events: Sequence[Any], *, thread_id: str, turn_id: str, limits: JsonLimits = DEFAULT_LIMITS
) -> list[KernelEvent]:
    """Outbox events must belong to this turn, have valid and unique ids, a type, unique
    sequences that increase in list order (the order they are delivered in), and JSON data.

    Checked before any write, so every store refuses the same events with the same error.
    """
    checked: list[KernelEvent] = []
    ids: set[str] = set()
    previous = -1
    for event in events:
        if not isinstance(event, KernelEvent):
            raise InvalidInputError(
                "outbox entries must be KernelEvent", context={"type": type(event).__name__}
            )
        event_id = validate_id(event.id, "event_id")
        check_event_type(event.type)
        if event.thread_id != thread_id or event.turn_id != turn_id:
            raise InvalidInputError(
                "an outbox event belongs to another thread or turn",
                code=ErrorCode.TURN_RESULT_MISMATCH,
                context={"event_id": event_id},
            )
        sequence = event.sequence
        if isinstance(sequence, bool) or not isinstance(sequence, int):
            raise InvalidInputError(
                "an event sequence must be an integer", context={"event_id": event_id}
            )
        if not 0 <= sequence <= MAX_SEQUENCE:
            raise InvalidInputError(
                f"an event sequence must be from 0 to {MAX_SEQUENCE}",
                context={"event_id": event_id, "sequence": sequence},
            )
        if event_id in ids:
            raise _duplicate("event id", event_id, sequence, "duplicate_event_id")
        if sequence <= previous:
            if any(e.sequence == sequence for e in checked):
                raise _duplicate("sequence", event_id, sequence, "duplicate_sequence")
            raise InvalidInputError(
                "event sequences must increase in the order the events are given",
                context={"event_id": event_id, "sequence": sequence, "previous": previous},
            )
        ids.add(event_id)
        previous = sequence
        checked.append(event)
    # One pass over every event's data (``$[n]`` is the n-th event): the kernel builds its
    # events without validation, so this is where a set or a date in event data is refused.
    # The list adds one level; sizes are checked per event when encoded, and per turn.
    codec.check([e.data for e in checked], limits=_whole(limits), what="outbox event data")
    return checked


_WHOLE: dict[JsonLimits, JsonLimits] = {}


def _whole(limits: JsonLimits) -> JsonLimits:
    """The limits of the list of a turn's event data (cached: ``replace`` is slow)."""
    found = _WHOLE.get(limits)
    if found is None:
        found = replace(limits, max_depth=limits.max_depth + 1, max_bytes=2**62)
        if len(_WHOLE) < 64:
            _WHOLE[limits] = found
    return found


def _duplicate(what: str, event_id: str, sequence: int, reason: str) -> InvalidInputError:
    return InvalidInputError(
        f"two outbox events of one turn have the same {what}",
        code=ErrorCode.DUPLICATE_EVENT,
        context={"event_id": event_id, "sequence": sequence, "reason": reason},
    )


MAX_PROGRESS_ITEMS = 1000
"""Progress items one write (an append, a commit) may carry."""


def check_progress(items: Any) -> list[str]:
    """A commit's progress items: a sequence of at most ``MAX_PROGRESS_ITEMS`` texts."""
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise InvalidInputError(
            "progress must be a sequence of texts", context={"field": "progress"}
        )
    checked = list(items)
    if len(checked) > MAX_PROGRESS_ITEMS or not all(isinstance(i, str) for i in checked):
        raise InvalidInputError(
            f"progress must be at most {MAX_PROGRESS_ITEMS} texts", context={"field": "progress"}
        )
    return checked


def check_outbox_size(events_json: Sequence[str], *, limits: JsonLimits) -> None:
    """A turn's encoded events together stay within ``limits.max_outbox_bytes``."""
    size = sum(len(text) if text.isascii() else len(text.encode("utf-8")) for text in events_json)
    if size > limits.max_outbox_bytes:
        raise SerializationError(
            f"the outbox events of one turn are {size} bytes, more than the limit of "
            f"{limits.max_outbox_bytes}",
            code=ErrorCode.PAYLOAD_TOO_LARGE,
            context={"what": "outbox events", "size": size, "limit": limits.max_outbox_bytes},
        )
