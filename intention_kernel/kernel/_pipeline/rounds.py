"""Stage: further rounds. The tool loop of a turn, bounded and under every rule of the first.

Why a round is asked for, not automatic: most turns know every step up front, and a second
``interpret`` call would only cost. An interpretation sets ``more`` when what else to do depends
on what its steps return ("check the balance and, if it is over 100, send 50"). After those
steps ran, the model is shown their ``results`` (what compose would see of them, scrubbed of
withheld fact values like every request) and plans again; the new steps go through the same
planning (policies, consent: a write planned in round 2 is held like any other), execution
(the effect ledger) and, at the end, one reduce and one ``compose``. Facts the earlier rounds
produced are visible to later ones. Bounds: ``KernelLimits.max_rounds`` rounds and
``max_steps`` steps per turn, all rounds together, and the turn's deadline; a model still
asking for more at the limit is told no in the answer (``ROUND_LIMIT``). A round whose steps
all waited (held for consent, refused) ends the loop: there is nothing new to see.
"""

from __future__ import annotations

from pydantic import JsonValue

from ...contracts.errors import FlowControlError
from ...contracts.events import EventCategory
from ...telemetry import plan_span
from .budget import spent, stop
from .compose import outcome_json
from .execute import execute
from .interpret import interpret
from .plan import plan
from .reduce import apply_outcome
from .state import Plan, StepOutcome, TurnState

__all__ = ["ROUND_LIMIT", "further_rounds"]

ROUND_LIMIT = "I stopped after {rounds} rounds of steps; tell me if I should go on."


def _results(state: TurnState) -> list[JsonValue]:
    """What the steps so far did, as the next round's model is shown it."""
    assert state.plan is not None
    shown: list[JsonValue] = [
        {**outcome_json(o), "input": o.step.input_json} for o in state.outcomes
    ]
    shown.extend(
        {
            "step_id": h.step.step_id,
            "capability_id": h.step.capability.id,
            "input": h.step.input_json,
            "status": str(h.status),
            "reason": h.reason,
        }
        for h in state.plan.held
    )
    return shown


def _wants_more(state: TurnState, ran: list[StepOutcome]) -> bool:
    interpretation = state.interpretation
    return (
        interpretation is not None and interpretation.more and state.refusal is None and bool(ran)
    )


async def further_rounds(state: TurnState) -> None:
    """Interpret, plan and execute again while the model asks to see results (bounded)."""
    assert state.plan is not None
    limits = state.runtime.limits
    ran = list(state.outcomes)
    turn_id = state.turn.turn_id
    while _wants_more(state, ran):
        if state.round >= limits.max_rounds or state.numbered >= limits.max_steps:
            state.plan.notes.append(ROUND_LIMIT.format(rounds=state.round))
            state.recorder.emit(
                "round.limited",
                {"rounds": state.round, "steps": state.numbered},
                cause=state.plan_event,
                category=EventCategory.AUDIT,
            )
            return
        facts = dict(state.facts)  # what this turn knows now; reduce still starts afresh
        for outcome in ran:
            apply_outcome(facts, outcome, turn_id)
        state.facts = facts
        state.round += 1
        results = _results(state)
        state.recorder.emit(
            "round.started",
            {"round": state.round, "results": len(results)},
            cause=state.plan_event,
        )
        try:
            malformed = await interpret(state, results)
        except FlowControlError as exc:
            if not spent(exc):
                raise
            stop(state, exc)  # what ran stays run; compose answers in the kernel's words
            return
        with plan_span() as planned:
            added: Plan = await plan(state, malformed)
            planned.planned(
                len(added.steps),
                ((h.step.capability.id, str(h.status)) for h in added.held),
                len(added.clarifications),
                state.round,
            )
        before = len(state.outcomes)
        await execute(state, added.steps)
        ran = state.outcomes[before:]
