"""Stage: commit. The successor checkpoint, the stored result and the outbox, atomically.

The successor's revision is the loaded one + 1 (the store compares and sets it). Messages are
bounded: the oldest beyond the limit are dropped and counted in ``omitted_messages``. Events are
redacted by the host's redactor before they are handed to the store.
"""

from __future__ import annotations

from pydantic import JsonValue

from ...contracts.checkpoint import SCHEMA_VERSION, KernelCheckpoint, Message
from ...contracts.events import EventCategory, KernelEvent
from ...contracts.turns import DurableTurnResult
from .state import TurnState

__all__ = ["commit"]


def successor(state: TurnState) -> KernelCheckpoint:
    reduction, response = state.reduction, state.response
    assert reduction is not None and response is not None
    previous = state.checkpoint
    now = state.runtime.clock()
    turn_id = state.turn.turn_id
    messages = [] if previous is None else list(previous.messages)
    messages.append(Message(role="user", text=state.turn.text, turn_id=turn_id, at=now))
    messages.append(Message(role="assistant", text=response.text, turn_id=turn_id, at=now))
    omitted = 0 if previous is None else previous.omitted_messages
    limit = state.runtime.limits.max_messages
    if len(messages) > limit:
        omitted += len(messages) - limit
        messages = messages[-limit:]
    return KernelCheckpoint(
        schema_version=SCHEMA_VERSION,
        revision=(0 if previous is None else previous.revision) + 1,
        agent_fingerprint=state.runtime.fingerprint,
        messages=messages,
        omitted_messages=omitted,
        facts=reduction.facts,
        agenda=reduction.agenda,
        interaction=reduction.interaction,
        receipts=reduction.receipts,
        metadata=_metadata(state),
    )


MAX_DECISIONS = 20
"""Approval and decline records kept in the checkpoint (the outbox's audit events keep all)."""


def _metadata(state: TurnState) -> dict[str, JsonValue]:
    previous = state.checkpoint
    metadata: dict[str, JsonValue] = {} if previous is None else dict(previous.metadata)
    assert state.plan is not None
    if state.plan.decisions:
        kept = metadata.get("decisions")
        decisions: list[JsonValue] = list(kept) if isinstance(kept, list) else []
        decisions.extend(state.plan.decisions)
        metadata["decisions"] = decisions[-MAX_DECISIONS:]
    return metadata


async def commit(state: TurnState) -> tuple[DurableTurnResult, list[KernelEvent]]:
    """Commit and return the stored result and the released (redacted) events: all of them
    for the in-process sinks, the ``outbox_categories`` ones in the outbox."""
    assert state.response is not None
    checkpoint = successor(state)
    state.recorder.emit(
        "turn.committed",
        {"revision": checkpoint.revision, "facts": len(checkpoint.facts)},
        cause=state.start_event,
        category=EventCategory.INTEGRATION,
    )
    # Kernel-built from validated parts; the store's codec checks the JSON when it commits,
    # so validating the whole response tree here again would only cost time.
    result = DurableTurnResult.model_construct(
        thread_id=state.turn.thread_id,
        turn_id=state.turn.turn_id,
        trace_id=state.turn.trace_id,
        response=state.response.model_dump(mode="json"),
        checkpoint=checkpoint,
    )
    events = state.recorder.released()
    kept = state.runtime.outbox_categories
    outbox = (
        events if len(kept) == len(EventCategory) else [e for e in events if e.category in kept]
    )
    progress = [] if state.progress is None else await state.progress.before_commit()
    if progress:
        await state.scope.commit(result, outbox, progress=progress)
    else:
        await state.scope.commit(result, outbox)
    return result, events
