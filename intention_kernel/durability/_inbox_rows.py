"""Request rows of the inbox as every backend stores them, and their reading back.

A backend keeps one row per request with the columns named in ``COLUMNS`` (times as
``datetime`` or ISO text, ``payload`` and ``operator_log`` as JSON text). Reading goes through
``decode_request`` so a row that cannot be read back raises ``CheckpointCorruptError`` the same
way on every store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..contracts import codec
from ..contracts.codec import DEFAULT_LIMITS, JsonLimits
from ..contracts.errors import CheckpointCorruptError, SerializationError
from ..contracts.inbox import InboxRequest, OperatorAction, ProgressEntry, RequestState

__all__ = [
    "COLUMNS",
    "CORRUPT_REQUEST",
    "decode_progress",
    "decode_request",
    "encode_log",
    "encode_payload",
]

COLUMNS = (
    "thread_id",
    "turn_id",
    "position",
    "state",
    "text",
    "payload",
    "fingerprint",
    "submitted_at",
    "not_before",
    "attempts",
    "claimed_by",
    "claimed_until",
    "finished_at",
    "error_code",
    "error",
    "operator_log",
)

CORRUPT_REQUEST = "the stored request cannot be read back"
"""The error a claim records on a request whose row it could not read (dead-lettered)."""


def encode_payload(
    selection: Mapping[str, Any] | None,
    host_context: Mapping[str, Any] | None,
    traceparent: str | None = None,
    limits: JsonLimits = DEFAULT_LIMITS,
) -> str:
    """The stored JSON of what a request carries besides its text."""
    payload: dict[str, Any] = {
        "selection": None if selection is None else dict(selection),
        "host_context": None if host_context is None else dict(host_context),
    }
    if traceparent is not None:
        payload["traceparent"] = traceparent
    return codec.encode(payload, limits=limits, what="turn request")


def encode_log(actions: Sequence[OperatorAction]) -> str:
    return codec.encode(
        [
            {
                "action": a.action,
                "actor": a.actor,
                "note": a.note,
                "at": a.at.isoformat(),
                "previous_state": str(a.previous_state),
            }
            for a in actions
        ],
        what="operator log",
    )


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        moment = datetime.fromisoformat(value)
    else:
        raise ValueError("not a time")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _object_or_none(value: Any) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise ValueError("not an object")
    return value


def _log(text: Any) -> tuple[OperatorAction, ...]:
    if text is None:
        return ()
    entries = codec.decode(text, what="operator log")
    if not isinstance(entries, list):
        raise ValueError("not a list")
    return tuple(
        OperatorAction(
            action=str(e["action"]),
            actor=str(e["actor"]),
            note=str(e["note"]),
            at=_time(e["at"]) or datetime.min.replace(tzinfo=UTC),
            previous_state=RequestState(e["previous_state"]),
        )
        for e in entries
    )


def _traceparent(value: Any) -> str | None:
    """A stored trace context is advisory: anything but short text is dropped, not an error."""
    return value if isinstance(value, str) and 0 < len(value) <= 256 else None


def decode_request(row: Mapping[str, Any]) -> InboxRequest:
    """The request a stored row holds, or ``CheckpointCorruptError`` naming it."""
    thread_id, turn_id = row["thread_id"], row["turn_id"]
    try:
        payload = codec.decode(row["payload"], what="turn request")
        if not isinstance(payload, dict) or not isinstance(row["text"], str):
            raise ValueError("not a request")
        submitted_at = _time(row["submitted_at"])
        not_before = _time(row["not_before"])
        if submitted_at is None or not_before is None:
            raise ValueError("no time")
        return InboxRequest(
            thread_id=thread_id,
            turn_id=turn_id,
            position=int(row["position"]),
            state=RequestState(row["state"]),
            text=row["text"],
            selection=_object_or_none(payload.get("selection")),
            host_context=_object_or_none(payload.get("host_context")),
            fingerprint=str(row["fingerprint"]),
            submitted_at=submitted_at,
            not_before=not_before,
            attempts=int(row["attempts"]),
            claimed_by=row["claimed_by"],
            claimed_until=_time(row["claimed_until"]),
            finished_at=_time(row["finished_at"]),
            error_code=row["error_code"],
            error=row["error"],
            operator_log=_log(row["operator_log"]),
            traceparent=_traceparent(payload.get("traceparent")),
        )
    except (SerializationError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointCorruptError(
            CORRUPT_REQUEST,
            context={"what": "turn request", "thread_id": thread_id, "turn_id": turn_id},
        ) from exc


def decode_progress(seq: int, text: str | bytes) -> ProgressEntry:
    """A stored progress item; one that cannot be read back is kept as ``{"type":
    "unreadable"}`` (progress is advisory: a watcher skips it, the committed result decides)."""
    try:
        item = codec.decode(text, what="progress item")
    except SerializationError:
        item = None
    if not isinstance(item, dict) or not isinstance(item.get("type"), str):
        item = {"type": "unreadable"}
    return ProgressEntry(int(seq), item)
