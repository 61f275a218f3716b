"""What the user did in a committed turn: their words, or the answer they gave with a button.

Why here: the HTTP history, the inspector's thread page and the ``turns`` command show the same
turn, and a selection turn has no text. The kernel records each answer to an interaction (the
option, who gave it, how, and the question as it was asked) in the checkpoint's
``metadata["decisions"]`` with the turn's id; the turn's own committed checkpoint always holds
it (the newest decisions are kept), so every view reads it from there.
"""

from __future__ import annotations

from pydantic import JsonValue

from ..contracts.turns import DurableTurnResult

__all__ = ["answer_line", "turn_answer", "turn_input"]

_SHOWN = (
    "decision",
    "option",
    "via",
    "actor",
    "answered_at",
    "question",
    "interaction_id",
    "capability_id",
    "edited",
    "proposed_question",
)
"""The parts of a decision record a history shows (no digest or internal ids)."""
_OBVIOUS = (("accepted", "yes"), ("declined", "no"))
"""Decisions whose option goes without saying."""


def _said(stored: DurableTurnResult) -> str | None:
    return next(
        (
            m.text
            for m in stored.checkpoint.messages
            if m.role == "user" and m.turn_id == stored.turn_id
        ),
        None,
    )


def turn_answer(stored: DurableTurnResult) -> dict[str, JsonValue] | None:
    """The answer the turn gave to an interaction (decision, option, via, actor, answered_at,
    question, interaction and capability ids), or ``None`` when it answered none."""
    decisions = stored.checkpoint.metadata.get("decisions")
    if not isinstance(decisions, list):
        return None
    for record in reversed(decisions):
        if isinstance(record, dict) and record.get("turn_id") == stored.turn_id:
            return {k: record[k] for k in _SHOWN if k in record}
    return None


def answer_line(answer: dict[str, JsonValue]) -> str:
    """One line for an answer: ``accepted: Please confirm: ...``, ``selected (Lisbon): ...``."""
    decision = str(answer.get("decision") or "answered")
    option = answer.get("option")
    chose = "" if (decision, option) in _OBVIOUS or option is None else f" ({option})"
    edited = answer.get("edited")
    if isinstance(edited, list) and edited:  # the question is then the approved operation's
        chose += f" with edits to {', '.join(str(f) for f in edited)}"
    what = answer.get("question") or answer.get("capability_id") or ""
    return f"{decision}{chose}: {what}"


def turn_input(stored: DurableTurnResult) -> str | None:
    """What the user said in the turn; for a button press (no text), what was chosen."""
    said = _said(stored)
    if said is not None and said.strip():
        return said
    answer = turn_answer(stored)
    return said if answer is None else answer_line(answer)
