"""The turn pipeline: one stage per module, run in order by ``run_pipeline``.

receipts -> project -> (selected answer) -> interpret -> plan -> resume -> execute -> (further
rounds of interpret -> plan -> execute, when the model asks to see results) -> reduce -> compose
-> commit
"""

from __future__ import annotations

from ...contracts.errors import FlowControlError
from ...contracts.events import KernelEvent
from ...contracts.turns import DurableTurnResult
from ...telemetry import plan_span
from .._expiry import is_expiry, is_external
from .budget import spent, stop
from .commit import commit
from .compose import compose
from .execute import execute
from .interpret import interpret
from .plan import plan
from .project import project
from .receipts import refresh_receipts
from .reduce import reduce
from .resume import resume, selected_answer
from .rounds import further_rounds
from .state import AgentRuntime, Interpretation, TurnState

__all__ = ["AgentRuntime", "TurnState", "run_pipeline"]


async def run_pipeline(state: TurnState) -> tuple[DurableTurnResult, list[KernelEvent]]:
    await refresh_receipts(state)  # reconciled receipts reach the checkpoint's copies
    project(state)
    chosen = selected_answer(state)  # a bad UI answer is refused before any model call
    selection = state.turn.selection
    timer = is_expiry(selection) or is_external(selection)  # no model reads these
    if (chosen is not None or timer) and not state.turn.text.strip():
        state.interpretation = Interpretation()  # a button press needs no interpretation
        malformed = []
    else:
        try:
            malformed = await interpret(state)
        except FlowControlError as exc:
            if not spent(exc):
                raise
            stop(state, exc)
            state.interpretation, malformed = Interpretation(), []
    with plan_span() as planned:  # the ik.plan span: a repair call nests in it
        await plan(state, malformed)
        if state.stopped is None:
            resume(state, chosen)
        if state.plan is not None:
            planned.planned(
                len(state.plan.steps),
                ((h.step.capability.id, str(h.status)) for h in state.plan.held),
                len(state.plan.clarifications),
            )
    if state.stopped is None:
        await execute(state)
        await further_rounds(state)
    reduce(state)
    await compose(state)
    return await commit(state)
