"""Server-sent events: one stream item of a turn as one ``event:``/``data:`` frame.

Why JSON on one line: a ``data:`` line ends at a newline, and the answer text may hold
newlines; ``json.dumps`` escapes them, so every frame is exactly two lines and a blank one (three
with the ``id:`` line of a followed turn: the cursor a client sends back as ``Last-Event-ID``).
"""

from __future__ import annotations

import json
from typing import Any

from ..kernel import (
    ConfirmationHeld,
    ProviderWait,
    RoundStarted,
    StepFinished,
    StepProgress,
    StepStarted,
    StreamItem,
    TextDelta,
    TurnCompleted,
)
from ._turns import turn_body

__all__ = ["EVENT_TYPES", "encode_comment", "encode_event", "encode_item"]

EVENT_TYPES = (
    "step.started",
    "step.finished",
    "step.progress",
    "round.started",
    "confirmation.held",
    "text.delta",
    "turn.completed",
    "error",
)
"""Every event a turn stream sends; the last one is ``turn.completed`` or ``error``."""


def encode_event(event: str, data: Any, event_id: str | None = None) -> bytes:
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = "" if event_id is None else f"id: {event_id}\n"
    return f"{head}event: {event}\ndata: {payload}\n\n".encode()


def encode_comment(text: str) -> bytes:
    """A comment line: keeps a quiet stream's connection open (clients ignore it)."""
    return f": {text}\n\n".encode()


def encode_item(
    item: StreamItem, event_id: str | None = None, replayed: bool | None = None
) -> bytes:
    """The frame of one ``CompiledAgent.stream`` (or ``watch``) item; ``replayed`` overrides
    what ``turn.completed`` says of the result."""
    match item:
        case StepStarted(step_id, capability_id):
            return encode_event(
                "step.started", {"step_id": step_id, "capability_id": capability_id}, event_id
            )
        case StepFinished(step_id, capability_id, status):
            return encode_event(
                "step.finished",
                {"step_id": step_id, "capability_id": capability_id, "status": str(status)},
                event_id,
            )
        case StepProgress(step_id, capability_id, message, progress, total):
            return encode_event(
                "step.progress",
                {
                    "step_id": step_id,
                    "capability_id": capability_id,
                    "message": message,
                    "progress": progress,
                    "total": total,
                },
                event_id,
            )
        case RoundStarted(number):
            return encode_event("round.started", {"round": number}, event_id)
        case ConfirmationHeld(interaction_id, kind, prompt, options):
            return encode_event(
                "confirmation.held",
                {
                    "interaction_id": interaction_id,
                    "kind": kind,
                    "prompt": prompt,
                    "options": list(options),
                },
                event_id,
            )
        case TextDelta(text, restarted):
            return encode_event("text.delta", {"text": text, "restarted": restarted}, event_id)
        case ProviderWait(provider, reason, seconds):
            return encode_event(
                "provider.wait",
                {"provider": provider, "reason": reason, "seconds": seconds},
                event_id,
            )
        case TurnCompleted(result):
            said = result.replayed if replayed is None else replayed
            return encode_event("turn.completed", turn_body(result, said), event_id)
    raise TypeError(f"not a stream item: {type(item).__name__}")  # pragma: no cover
