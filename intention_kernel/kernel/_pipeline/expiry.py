"""Consent past its deadline: an accept that came too late, and a question's timer turn, which
closes the question at its deadline and drops its operation.

Why a turn: the checkpoint is changed only by a committed turn, so closing an expired question
is one (``_expiry`` keeps the timer that submits it, with the selection
``{"expire_interaction": <id>}``). It asks no model: its answer is the kernel's.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import JsonValue

from ...contracts.checkpoint import AgendaItem, Interaction
from ...contracts.errors import ErrorCode
from ...contracts.events import EventCategory
from .._expiry import EXPIRE_INTERACTION, EXPIRES_AT, expired
from .state import Plan, TurnState

__all__ = [
    "LATE",
    "NOTHING_EXPIRED",
    "QUESTION_EXPIRED",
    "expire",
    "expiring_question",
    "late_accept",
]

QUESTION_EXPIRED = (
    "The question expired ({what}): nothing was done. Ask again if you still want it."
)
NOTHING_EXPIRED = "Nothing was waiting for an answer any more."
LATE = (
    "Your confirmation came after the question expired ({what}), so I have not done it."
    " Please confirm again."
)


def expiring_question(state: TurnState) -> Interaction | None:
    """The open question the turn's timer selection names (``None``: answered meanwhile, and
    ``resume`` says nothing waits)."""
    selection = state.turn.selection
    active = None if state.checkpoint is None else state.checkpoint.interaction
    if selection is None or active is None or active.id != selection.get(EXPIRE_INTERACTION):
        return None
    return active


def expire(state: TurnState, plan: Plan, interaction: Interaction) -> None:
    """The question's timer turn: past its deadline, the question is closed and its operation
    dropped (nothing runs); before it (a clock behind the timer's), nothing changes."""
    checkpoint = state.checkpoint
    assert checkpoint is not None
    item = next((a for a in checkpoint.agenda if a.id == interaction.agenda_item_id), None)
    if item is None or not expired(item.data, state.runtime.clock()):
        plan.notes.append(NOTHING_EXPIRED)
        return
    plan.close_interaction = True
    plan.resolved.add(item.id)
    cap = state.runtime.capabilities.get(item.capability_id)
    description = (cap.description if cap else item.capability_id).rstrip(".")
    record: dict[str, JsonValue] = {
        "interaction_id": interaction.id,
        "agenda_item_id": item.id,
        "capability_id": item.capability_id,
        "turn_id": state.turn.turn_id,
        "expires_at": item.data[EXPIRES_AT],
    }
    plan.decisions.append(
        {
            **record,
            "decision": "expired",
            "code": str(ErrorCode.INTERACTION_EXPIRED),
            "via": "timer",
        }
    )
    plan.notes.append(QUESTION_EXPIRED.format(what=description))
    _audit(state, record)


def late_accept(
    state: TurnState,
    plan: Plan,
    record: Mapping[str, JsonValue],
    question: Mapping[str, str],
    what: str,
    item: AgendaItem,
) -> None:
    """An accept at or after the deadline: nothing runs, ``INTERACTION_EXPIRED`` is recorded
    and said in kernel words (``resume`` then asks again with the values of now)."""
    code = str(ErrorCode.INTERACTION_EXPIRED)
    plan.decisions.append({**record, **question, "decision": "expired", "code": code})
    plan.notes.append(LATE.format(what=what))
    _audit(state, {**record, "expires_at": item.data[EXPIRES_AT]})


def _audit(state: TurnState, record: dict[str, JsonValue]) -> None:
    state.recorder.emit(
        "confirmation.expired", record, cause=state.plan_event, category=EventCategory.AUDIT
    )
