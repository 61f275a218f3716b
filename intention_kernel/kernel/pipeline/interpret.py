"""Stage: interpretation. The model turns the user's words into intentions.

Why validate here: the model's answer is untrusted data. A malformed interpretation is kept as
``None`` with its problems so the planner can ask for one repair, never executed as is.
"""

from __future__ import annotations

from pydantic import JsonValue, ValidationError

from ...contracts.events import EventCategory
from ._model import ask
from .state import Interpretation, TurnState

__all__ = ["interpret", "parse_interpretation", "validation_problems"]


def validation_problems(exc: ValidationError) -> list[JsonValue]:
    """Safe, JSON-ready problems (location, message, type), without the offending input."""
    return [
        {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
        for e in exc.errors(include_url=False, include_input=False, include_context=False)
    ]


def parse_interpretation(output: JsonValue) -> tuple[Interpretation | None, list[JsonValue]]:
    try:
        return Interpretation.model_validate(output), []
    except ValidationError as exc:
        return None, validation_problems(exc)


async def interpret(state: TurnState) -> list[JsonValue]:
    """Fill ``state.interpretation``; return the problems when the answer was malformed."""
    runtime = state.runtime
    output = await ask(
        state,
        "interpret",
        runtime.definition.instructions,
        {
            "text": state.turn.text,
            "selection": None if state.turn.selection is None else dict(state.turn.selection),
            "context": state.projection,
            "capabilities": runtime.catalog,
        },
        runtime.interpretation_schema,
    )
    interpretation, problems = parse_interpretation(output)
    state.interpretation = interpretation
    state.recorder.emit(
        "interpretation.completed",
        {
            "valid": interpretation is not None,
            "intentions": []
            if interpretation is None
            else [i.capability for i in interpretation.intentions],
        },
        cause=state.start_event,
        category=EventCategory.TRACE,
    )
    return problems
