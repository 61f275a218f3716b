"""Stage: interpretation. The model turns the user's words into intentions.

Why validate here: the model's answer is untrusted data. A malformed interpretation is kept as
``None`` with its problems so the planner can ask for one repair, never executed as is. A
refusal is kept apart (``state.refusal``): the planner answers safely without a repair.

Bounded prompts: once the agent has more than ``KernelLimits.select_above`` capabilities, a
``select`` request first shows the model only each capability's id and description and asks
which (at most ``select_at_most``) the message may need; ``interpret`` then gets the full
entries and input schemas of those alone, plus the capabilities pending work waits on (so an
answer or a restatement still finds them). An unusable selection falls back to the whole
catalog: a bigger prompt, never a missed capability.
"""

from __future__ import annotations

from pydantic import JsonValue, ValidationError

from ...contracts import codec
from ...contracts.errors import SerializationError
from ...contracts.events import EventCategory
from .._prompts import selection_schema
from ._model import ask
from .state import Interpretation, TurnState

__all__ = ["interpret", "parse_interpretation", "select", "validation_problems"]


def validation_problems(exc: ValidationError) -> list[JsonValue]:
    """Safe, JSON-ready problems (location, message, type), without the offending input."""
    return [
        {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
        for e in exc.errors(include_url=False, include_input=False, include_context=False)
    ]


def parse_interpretation(output: JsonValue) -> tuple[Interpretation | None, list[JsonValue]]:
    try:
        interpretation = Interpretation.model_validate(output)
    except ValidationError as exc:
        return None, validation_problems(exc)
    try:
        # The proposed names are recorded (``interpretation.completed``): they must be storable.
        codec.check([i.capability for i in interpretation.intentions], what="capability names")
    except SerializationError as exc:
        return None, [{"loc": ["intentions"], "msg": exc.message, "type": str(exc.code)}]
    return interpretation, []


def _chosen_ids(output: JsonValue) -> list[str] | None:
    chosen = output.get("capabilities") if isinstance(output, dict) else None
    if not isinstance(chosen, list) or not all(isinstance(c, str) for c in chosen):
        return None
    return [c for c in chosen if isinstance(c, str)]


async def select(state: TurnState) -> None:
    """Choose the capabilities ``interpret`` is shown (``state.chosen``), when the catalog is
    past the limit; otherwise leave the whole catalog."""
    runtime = state.runtime
    catalog, limits = runtime.catalog, runtime.limits
    if len(catalog.ids) <= limits.select_above:
        return
    reply = await ask(
        state,
        "select",
        {
            "text": state.turn.text,
            "selection": None if state.turn.selection is None else dict(state.turn.selection),
            "context": state.projection,
            "capabilities": catalog.summaries,
        },
        selection_schema(limits.select_at_most),
    )
    if reply.refusal is not None:
        state.refusal = reply.refusal
        return
    named = _chosen_ids(reply.output)
    if named is not None:
        picked = list(dict.fromkeys(i for i in named if i in runtime.capabilities))
        pending = [] if state.checkpoint is None else state.checkpoint.agenda
        state.chosen = catalog.ordered(
            [*picked[: limits.select_at_most], *(a.capability_id for a in pending)]
        )
    state.recorder.emit(
        "capabilities.selected",
        {
            "valid": named is not None,
            "chosen": None if state.chosen is None else list[JsonValue](state.chosen),
            "of": len(catalog.ids),
        },
        cause=state.start_event,
    )


async def interpret(state: TurnState, results: list[JsonValue] | None = None) -> list[JsonValue]:
    """Fill ``state.interpretation``; return the problems when the answer was malformed.

    ``results``: a further round (``rounds``) shows the model what the steps of the earlier
    rounds returned; it sees the capabilities the first round chose (no second ``select``)."""
    if results is None:
        await select(state)
        if state.refusal is not None:
            _completed(state, None)
            return []
    catalog = state.runtime.catalog
    shown = catalog.ids if state.chosen is None else state.chosen
    payload: dict[str, JsonValue] = {
        "text": state.turn.text,
        "selection": None if state.turn.selection is None else dict(state.turn.selection),
        "context": state.projection,
        "capabilities": catalog.entries(shown),
    }
    if results is not None:
        payload["round"] = state.round
        payload["results"] = results
    reply = await ask(state, "interpret", payload, catalog.schema(shown))
    if reply.refusal is not None:
        state.refusal = reply.refusal
        _completed(state, None)
        return []
    interpretation, problems = parse_interpretation(reply.output)
    state.interpretation = interpretation
    _completed(state, interpretation)
    return problems


def _completed(state: TurnState, interpretation: Interpretation | None) -> None:
    state.recorder.emit(
        "interpretation.completed",
        {
            "valid": interpretation is not None,
            "intentions": []
            if interpretation is None
            else [i.capability for i in interpretation.intentions],
            "refused": None if state.refusal is None else state.refusal.kind,
            "round": state.round,
            "more": interpretation is not None and interpretation.more,
        },
        cause=state.start_event,
        category=EventCategory.TRACE,
    )
