"""A budget that runs out during a turn ends it cleanly, in the kernel's words.

Why an answer and not an error: the turn is a request like any other, and "the budget is used
up" is its answer. It commits like any other (a replay returns it; a submitted request is
done), steps that already ran stay run and are reported, a confirmation already held stays
held, and nothing else runs: no further model call, no further step. The response's kind is
``budget_exceeded`` so a host can tell it apart, and a ``budget.exceeded`` audit event records
which budget and until when. A provider that stays busy past the turn's deadline
(``PROVIDER_BUSY``) is not such an answer: that turn fails, retryable, as a timeout would.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import JsonValue

from ...contracts.errors import ErrorCode, FlowControlError
from ...contracts.events import EventCategory
from .state import TurnState

__all__ = ["budget_line", "spent", "stop"]


def spent(exc: FlowControlError) -> bool:
    """Whether ``exc`` is a used-up budget (the turn answers) rather than a busy provider."""
    return exc.code is ErrorCode.BUDGET_EXCEEDED


def stop(state: TurnState, exc: FlowControlError) -> None:
    """Record that the turn stops here: no model call and no step from now on."""
    if state.stopped is not None:
        return
    state.stopped = exc
    context = exc.context
    data: dict[str, JsonValue] = {
        "budget": str(context.get("budget", "")),
        "window_end": _text(context.get("window_end")),
    }
    state.recorder.emit(
        "budget.exceeded", data, cause=state.start_event, category=EventCategory.AUDIT
    )


def budget_line(exc: FlowControlError) -> str:
    """What the user is told: what happened, and when asking again can help."""
    ends = _text(exc.context.get("window_end"))
    when = ""
    if ends is not None:
        try:
            when = f" until {datetime.fromisoformat(ends):%Y-%m-%d %H:%M %Z}".rstrip()
        except ValueError:
            when = ""
    return (
        f"I stopped here: the model budget for this is used up{when}. Nothing more was done;"
        " ask again later, or ask an operator to raise the limit."
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
