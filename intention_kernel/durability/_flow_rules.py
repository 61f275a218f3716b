"""The rules of budget counters and provider slots, written once (``contracts.flow``).

Pure functions: the memory store applies them as they are, SQLite applies them inside one
``BEGIN IMMEDIATE`` transaction (one writer at a time), and PostgreSQL's functions translate
them (``postgres/_flow_sql``). Each store so grants, refuses and queues the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..contracts.flow import ANY_KEY, BudgetLine, SlotAnswer, SlotRequest

__all__ = [
    "BUSY_WAIT",
    "WAITER_GRACE",
    "Counter",
    "admits",
    "limits_in_force",
    "minute_of",
    "slot_answer",
]

BUSY_WAIT = 0.05
"""Seconds a holder told ``busy`` waits before asking again (the kernel backs off from it)."""
WAITER_GRACE = 2.0
"""A waiter keeps its place in a provider's queue this long after the wait it was told, so a
waiter that stopped asking (cancelled, crashed) does not hold the queue up."""


@dataclass(slots=True)
class Counter:
    """One budget line in one window, as stored."""

    per: str
    tokens_used: int = 0
    tokens_reserved: int = 0
    cost_used: float = 0.0
    cost_reserved: float = 0.0
    calls: int = 0
    tokens_limit: int | None = None
    """The limits declared in code at the last reservation (shown when no code is at hand)."""
    cost_limit: float | None = None


def limits_in_force(
    line: BudgetLine, overrides: Mapping[str, tuple[int | None, float | None]]
) -> tuple[int | None, float | None, bool]:
    """The token and cost limits of ``line``: an operator's for its key, else for ``ANY_KEY``,
    else the code's; and whether one came from an operator. ``overrides`` maps a key (the
    line's or ``ANY_KEY``) to its ``(tokens, cost)``, ``None`` where the code's stands."""
    tokens, cost, overridden = line.tokens, line.cost, False
    for key in (ANY_KEY, line.key):  # the line's own key last: it wins
        found = overrides.get(key)
        if found is None:
            continue
        if found[0] is not None:
            tokens, overridden = found[0], True
        if found[1] is not None:
            cost, overridden = found[1], True
    return tokens, cost, overridden


def admits(counter: Counter, tokens_limit: int | None, cost_limit: float | None) -> bool:
    """Whether a reservation is granted: something is left of every limit."""
    if tokens_limit is not None and counter.tokens_used + counter.tokens_reserved >= tokens_limit:
        return False
    return cost_limit is None or counter.cost_used + counter.cost_reserved < cost_limit


def minute_of(now: datetime) -> datetime:
    return now.replace(second=0, microsecond=0)


def slot_answer(
    request: SlotRequest,
    now: datetime,
    *,
    holds: bool,
    in_use: int,
    ahead: int,
    started: int,
    cooling_until: datetime | None,
) -> SlotAnswer:
    """Grant or refuse a slot. ``holds``: the holder has a live slot (asking renews it);
    ``in_use``: live slots of others; ``ahead``: waiters queued before the holder;
    ``started``: calls started in this minute."""
    if holds:
        return SlotAnswer(True, "granted")
    if cooling_until is not None and cooling_until > now:
        wait = (cooling_until - now).total_seconds()
        return SlotAnswer(False, "cooling", wait, ahead, cooling_until)
    if request.concurrent is not None and in_use + ahead >= request.concurrent:
        return SlotAnswer(False, "busy", BUSY_WAIT, ahead)
    if request.per_minute is not None and started + ahead >= request.per_minute:
        wait = (minute_of(now) + timedelta(minutes=1) - now).total_seconds()
        return SlotAnswer(False, "rate", wait, ahead)
    return SlotAnswer(True, "granted")
