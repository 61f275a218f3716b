"""Pure turn rules shared by every adapter: fingerprints, commit checks, revision CAS."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..contracts.errors import ErrorCode, InvalidInputError, TurnConflictError
from ..contracts.events import KernelEvent
from ..contracts.turns import DurableTurnResult

__all__ = [
    "MAX_FINGERPRINT_LENGTH",
    "already_committed",
    "check_fingerprint",
    "check_outbox",
    "check_result",
    "check_revision",
    "validate_fingerprint",
]

MAX_FINGERPRINT_LENGTH = 256


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


def check_outbox(events: Sequence[Any], *, thread_id: str, turn_id: str) -> list[KernelEvent]:
    """Outbox events must belong to this turn and have unique ids."""
    checked: list[KernelEvent] = []
    seen: set[str] = set()
    for event in events:
        if not isinstance(event, KernelEvent):
            raise InvalidInputError(
                "outbox entries must be KernelEvent", context={"type": type(event).__name__}
            )
        if event.thread_id != thread_id or event.turn_id != turn_id:
            raise InvalidInputError(
                "an outbox event belongs to another thread or turn",
                code=ErrorCode.TURN_RESULT_MISMATCH,
                context={"event_id": event.id},
            )
        if event.id in seen:
            raise InvalidInputError(
                "outbox event ids must be unique", context={"event_id": event.id}
            )
        seen.add(event.id)
        checked.append(event)
    return checked
