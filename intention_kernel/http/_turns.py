"""The JSON of a turn, a thread and its history, as the service answers them.

Why a summary rather than the checkpoint: a checkpoint holds fact values, kernel-private
metadata and receipt values, which a front end has no business reading (a hidden fact stays
hidden). The summary says where the thread stands: its revision, what it waits on, the facts
by type and revision, the agenda and the receipts by status.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..contracts.checkpoint import Interaction, KernelCheckpoint
from ..contracts.inbox import InboxRequest
from ..contracts.turns import DurableTurnResult
from ..kernel import Response, TurnResult
from ..operations._history import turn_answer, turn_input
from ._problems import safe_error

__all__ = [
    "checkpoint_summary",
    "committed_body",
    "interaction_json",
    "request_body",
    "response_json",
    "stored_turn_json",
    "thread_body",
    "turn_body",
    "user_input",
]


def interaction_json(interaction: Interaction | None) -> dict[str, Any] | None:
    if interaction is None:
        return None
    return {
        "id": interaction.id,
        "kind": interaction.kind,
        "prompt": interaction.prompt,
        "options": list(interaction.options),
        # When an accept stops counting (consent that expires, docs/writes.md), else null.
        "expires_at": interaction.data.get("expires_at"),
    }


def checkpoint_summary(checkpoint: KernelCheckpoint) -> dict[str, Any]:
    return {
        "revision": checkpoint.revision,
        "schema_version": checkpoint.schema_version,
        "agent_fingerprint": checkpoint.agent_fingerprint,
        "messages": len(checkpoint.messages),
        "omitted_messages": checkpoint.omitted_messages,
        "facts": [
            {"id": f.id, "type": f"{f.type}@{f.version}", "revision": f.revision}
            for f in checkpoint.facts
        ],
        "agenda": [
            {"id": a.id, "capability_id": a.capability_id, "status": str(a.status)}
            for a in checkpoint.agenda
        ],
        "receipts": [
            {
                "idempotency_key": r.idempotency_key,
                "capability_id": r.capability_id,
                "status": str(r.status),
            }
            for r in checkpoint.receipts
        ],
    }


def response_json(response: Response) -> dict[str, Any]:
    return {
        "text": response.text,
        "kind": response.kind,
        "citations": list(response.citations),
        "steps": [step.model_dump(mode="json") for step in response.steps],
    }


def turn_body(result: TurnResult, replayed: bool) -> dict[str, Any]:
    """The answer to ``POST .../turns`` (and the data of ``turn.completed``)."""
    return {
        "thread_id": result.thread_id,
        "turn_id": result.turn_id,
        "replayed": replayed,
        "response": response_json(result.response),
        "interaction": interaction_json(result.checkpoint.interaction),
        "checkpoint": checkpoint_summary(result.checkpoint),
    }


def _stored_response(stored: DurableTurnResult) -> Any:
    try:
        return response_json(Response.model_validate(stored.response))
    except ValidationError:
        return stored.response  # written by another kind of caller: shown as stored


def committed_body(stored: DurableTurnResult) -> dict[str, Any]:
    """A committed turn as ``POST .../turns`` answers it, read back (``replayed``: a read)."""
    return {
        "thread_id": stored.thread_id,
        "turn_id": stored.turn_id,
        "replayed": True,
        "response": _stored_response(stored),
        "interaction": interaction_json(stored.checkpoint.interaction),
        "checkpoint": checkpoint_summary(stored.checkpoint),
    }


def _when(value: Any) -> str | None:
    return None if value is None else str(value.isoformat())


def request_body(
    thread_id: str,
    turn_id: str,
    request: InboxRequest | None,
    stored: DurableTurnResult | None,
    *,
    state: str | None = None,
) -> dict[str, Any]:
    """Where a turn stands (``GET .../turns/{turn_id}``, the 202 answer): its request's state,
    place in submission order, attempts and last failure, and its result once committed. A
    turn run directly has no request: ``done`` when committed, else ``state``."""
    if stored is not None:
        said = "done"
    elif request is not None:
        said = str(request.state)
    else:
        said = state or "running"
    failed = None if request is None else request.error_code
    return {
        "thread_id": thread_id,
        "turn_id": turn_id,
        "state": said,
        "position": None if request is None or request.position == 0 else request.position,
        "attempts": 0 if request is None else request.attempts,
        "submitted_at": None if request is None else _when(request.submitted_at),
        "not_before": None if request is None else _when(request.not_before),
        "finished_at": None if request is None else _when(request.finished_at),
        "error_code": failed,
        "error": None if request is None else safe_error(failed, request.error),
        "result": None if stored is None else committed_body(stored),
    }


def thread_body(thread_id: str, checkpoint: KernelCheckpoint) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "checkpoint": checkpoint_summary(checkpoint),
        "interaction": interaction_json(checkpoint.interaction),
    }


def user_input(stored: DurableTurnResult) -> str | None:
    """What the user said in a committed turn, or for a button press what was chosen
    (``accepted: Please confirm: ...``), as its checkpoint recorded it (if it did)."""
    return turn_input(stored)


def stored_turn_json(stored: DurableTurnResult) -> dict[str, Any]:
    """One committed turn of the history: ids, the user's input (or choice), the answer it gave
    to an interaction (decision, option, actor, question) and the stored response."""
    return {
        "turn_id": stored.turn_id,
        "revision": stored.checkpoint.revision,
        "trace_id": stored.trace_id,
        "input": user_input(stored),
        "answer": turn_answer(stored),
        "response": _stored_response(stored),
    }
