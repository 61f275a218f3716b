"""A turn as a broker message: what a publisher sends, and which partition it goes to.

Why partitions: the inbox runs a thread's requests in submission order, so a thread's messages
must be submitted in the order they were published. A broker keeps order within one stream or
subject, so a publisher sends every message of a thread to the same partition
(``partition_of``), and the ingress submits each partition's messages one at a time, in order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from ..contracts.errors import ErrorCode, InvalidInputError

__all__ = ["MAX_MESSAGE_BYTES", "TurnMessage", "decode_turn", "encode_turn", "partition_of"]

MAX_MESSAGE_BYTES = 256 * 1024
"""A message's body at most: a turn's text and selection are bounded far below it."""
_MEMBERS = {"thread_id", "text", "selection", "host_context"}


@dataclass(frozen=True, slots=True)
class TurnMessage:
    """One turn to submit: the body's members and the turn id the message carries."""

    thread_id: str
    turn_id: str
    text: str = ""
    selection: Mapping[str, JsonValue] | None = None
    host_context: Mapping[str, Any] = field(default_factory=dict)


def partition_of(thread_id: str, partitions: int) -> int:
    """The partition of a thread (0 to ``partitions - 1``): the same in every process and
    release, so every message of a thread goes to one partition."""
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ValueError("partitions is a positive integer")
    digest = hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % partitions


def encode_turn(thread_id: str, *, text: str = "", selection: Any = None) -> bytes:
    """A message body for the turn (publishers; the turn id goes in a header on NATS, in the
    entry's ``turn_id`` field on Redis)."""
    body: dict[str, Any] = {"thread_id": thread_id, "text": text}
    if selection is not None:
        body["selection"] = selection
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _refused(message: str, **context: JsonValue) -> InvalidInputError:
    return InvalidInputError(message, code=ErrorCode.INVALID_INPUT, context=context)


def decode_turn(body: bytes, turn_id: str | None) -> TurnMessage:
    """The turn a message asks for (``InvalidInputError`` when it asks for none): a JSON
    object ``{"thread_id", "text", "selection", "host_context"}`` (only ``thread_id`` is
    required) and a turn id from the message's header. The submit checks the values."""
    if not turn_id:
        raise _refused("the message carries no turn id (Ik-Turn-Id or Nats-Msg-Id)")
    if len(body) > MAX_MESSAGE_BYTES:
        raise _refused("the message is larger than a turn may be", limit=MAX_MESSAGE_BYTES)

    def refuse(constant: str) -> None:
        raise ValueError(constant)

    try:
        parsed = json.loads(body, parse_constant=refuse)
    except (ValueError, RecursionError):
        raise InvalidInputError(
            "the message is not a JSON document", code=ErrorCode.INVALID_JSON
        ) from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("thread_id"), str):
        raise _refused('the message is not {"thread_id": ..., "text": ...}')
    unknown = sorted(set(parsed) - _MEMBERS)
    if unknown:
        raise _refused("the message has unknown members", unknown=unknown[:10])
    text, selection = parsed.get("text", ""), parsed.get("selection")
    context = parsed.get("host_context")
    context = {} if context is None else context
    if not isinstance(text, str) or not isinstance(selection, dict | None):
        raise _refused("text is a string and selection an object")
    if not isinstance(context, dict):
        raise _refused("host_context is an object")
    return TurnMessage(parsed["thread_id"], turn_id, text, selection, context)
