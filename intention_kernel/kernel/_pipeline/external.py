"""A parked step meets the outside world: its completion, or its timeout.

Why a turn each: the checkpoint changes only by a committed turn. ``complete_external``
submits the completing turn (``{"external_key": ..., "result": ...}``); the step's timer submits
its timeout's turn (``{"external_timeout": <key>}``). Neither asks a model to read it. A
completion resumes the step: its capability runs again with the same input and
``context.external`` set, so a write it started before parking replays from the ledger.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import JsonValue

from ...contracts.checkpoint import AgendaItem, AgendaStatus, KernelCheckpoint
from ...contracts.events import EventCategory
from .._context import ExternalCompletion
from .._expiry import EXTERNAL_KEY, EXTERNAL_TIMEOUT, expired
from ..approval import Approval
from .state import Plan, PlannedStep, TurnState

__all__ = ["NOTHING_PARKED", "TIMED_OUT", "parked", "resume_external"]

NOTHING_PARKED = "Nothing was waiting for that any more."
TIMED_OUT = "{what} did not complete in time: I have stopped waiting for it."

Rebuild = Callable[[TurnState, AgendaItem, str], PlannedStep | None]


def parked(checkpoint: KernelCheckpoint | None, key: str) -> AgendaItem | None:
    """The thread's step parked under ``key``, if it still waits."""
    if checkpoint is None:
        return None
    return next(
        (
            a
            for a in checkpoint.agenda
            if a.status == AgendaStatus.AWAITING_EXTERNAL and a.data.get(EXTERNAL_KEY) == key
        ),
        None,
    )


def resume_external(state: TurnState, plan: Plan, rebuild: Rebuild) -> None:
    """The turn's selection completes a parked step (it runs first) or times it out."""
    selection = state.turn.selection
    assert selection is not None
    timeout = EXTERNAL_TIMEOUT in selection
    key = str(selection[EXTERNAL_TIMEOUT] if timeout else selection[EXTERNAL_KEY])
    item = parked(state.checkpoint, key)
    if item is None or (timeout and not expired(item.data, state.runtime.clock())):
        plan.notes.append(NOTHING_PARKED)  # completed, timed out, or not due by this clock
        return
    plan.resolved.add(item.id)
    cap = state.runtime.capabilities.get(item.capability_id)
    what = cap.description.rstrip(".") if cap else item.capability_id
    record: dict[str, JsonValue] = {
        "agenda_item_id": item.id,
        "capability_id": item.capability_id,
        "external_key": key,
        "turn_id": state.turn.turn_id,
    }
    step = None if timeout else rebuild(state, item, "external-1")
    if step is None:
        plan.decisions.append({**record, "decision": "timed_out" if timeout else "refused"})
        plan.notes.append(TIMED_OUT.format(what=what))
        _audit(state, "external.timed_out" if timeout else "external.refused", record)
        return
    payload = item.data.get("payload")
    step.approval = Approval.from_json(item.data.get("approval"))
    step.external = ExternalCompletion(
        key, selection["result"], payload if isinstance(payload, dict) else {}
    )
    plan.decisions.append({**record, "decision": "completed"})
    plan.steps.insert(0, step)
    _audit(state, "external.completed", record)


def _audit(state: TurnState, kind: str, record: dict[str, JsonValue]) -> None:
    state.recorder.emit(kind, record, cause=state.plan_event, category=EventCategory.AUDIT)
