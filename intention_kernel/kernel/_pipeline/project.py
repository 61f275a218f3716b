"""Stage: context projection. What the model sees of the thread, bounded.

Why bounded: per-turn cost must not grow with thread length, so only the most recent messages
are shown (with a count of the omitted ones), plus the visible facts, the agenda and the active
interaction. Facts are shown as their fact types allow (``define_fact``): in full with redacted
paths replaced, as present only, or not at all.
"""

from __future__ import annotations

from pydantic import JsonValue

from .state import TurnState

__all__ = ["project"]


def project(state: TurnState) -> None:
    checkpoint = state.checkpoint
    if checkpoint is None:
        state.projection = {
            "messages": [],
            "omitted_messages": 0,
            "facts": [],
            "agenda": [],
            "interaction": None,
        }
        return
    keep = state.runtime.limits.context_messages
    recent = checkpoint.messages[-keep:]
    omitted = checkpoint.omitted_messages + len(checkpoint.messages) - len(recent)
    messages: list[JsonValue] = [{"role": m.role, "text": m.text} for m in recent]
    view = state.runtime.facts
    shown = (view.show(f) for f in checkpoint.facts)
    facts: list[JsonValue] = [f for f in shown if f is not None]
    agenda: list[JsonValue] = [
        {"id": a.id, "capability": a.capability_id, "status": str(a.status), "reason": a.reason}
        for a in checkpoint.agenda
    ]
    interaction = checkpoint.interaction
    state.projection = {
        "messages": messages,
        "omitted_messages": omitted,
        "facts": facts,
        "agenda": agenda,
        "interaction": None
        if interaction is None
        else {
            "id": interaction.id,
            "kind": interaction.kind,
            "prompt": interaction.prompt,
            "options": list(interaction.options),
        },
    }
