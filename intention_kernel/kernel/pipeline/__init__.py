"""The turn pipeline: one stage per module, run in order by ``run_pipeline``.

project -> interpret -> plan -> execute -> reduce -> compose -> commit
"""

from __future__ import annotations

from ...contracts.events import KernelEvent
from ...contracts.turns import DurableTurnResult
from .commit import commit
from .compose import compose
from .execute import execute
from .interpret import interpret
from .plan import plan
from .project import project
from .reduce import reduce
from .state import AgentRuntime, TurnState

__all__ = ["AgentRuntime", "TurnState", "run_pipeline"]


async def run_pipeline(state: TurnState) -> tuple[DurableTurnResult, list[KernelEvent]]:
    project(state)
    malformed = await interpret(state)
    await plan(state, malformed)
    await execute(state)
    reduce(state)
    await compose(state)
    return await commit(state)
