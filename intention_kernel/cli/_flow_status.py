"""The budgets and providers part of ``status``: the current window of each budget line, the
exhausted ones and the most used first, bounded so that a store with thousands of tenants keeps
``status`` short (``budgets usage`` lists every line).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..contracts.errors import KernelError
from ..contracts.flow import BudgetUsage, FlowCounters
from ._common import out, print_table

__all__ = ["READ", "SHOWN_EXHAUSTED", "SHOWN_USED", "flow_status", "print_flow_status"]

READ = 1000
"""Budget lines read (newest window first): the most the store answers in one call."""
SHOWN_EXHAUSTED = 20
"""Exhausted lines listed by ``status``."""
SHOWN_USED = 5
"""Lines with something left listed by ``status``, the most used first."""


def counters_or_none(store: Any) -> FlowCounters | None:
    """The store's counters, or ``None`` for a store built without them."""
    try:
        found = getattr(store, "counters", None)
    except KernelError:  # a store without the flow role says NOT_SUPPORTED
        return None
    return found if isinstance(found, FlowCounters) else None


def share_used(line: BudgetUsage) -> float:
    """The largest share of a limit that is used or reserved (1.0: exhausted)."""
    shares = [0.0]
    if line.tokens_limit:
        shares.append((line.tokens_used + line.tokens_reserved) / line.tokens_limit)
    if line.cost_limit:
        shares.append((line.cost_used + line.cost_reserved) / line.cost_limit)
    return max(shares)


def current(line: BudgetUsage, now: datetime) -> bool:
    return line.window_end is None or line.window_end > now


def line_json(line: BudgetUsage) -> dict[str, Any]:
    return {
        "budget": line.budget,
        "key": line.key,
        "window": line.per,
        "window_start": line.window_start.isoformat(),
        "window_end": None if line.window_end is None else line.window_end.isoformat(),
        "tokens_used": line.tokens_used,
        "tokens_reserved": line.tokens_reserved,
        "tokens_limit": line.tokens_limit,
        "tokens_left": line.tokens_left,
        "cost_used": line.cost_used,
        "cost_reserved": line.cost_reserved,
        "cost_limit": line.cost_limit,
        "cost_left": line.cost_left,
        "calls": line.calls,
        "exhausted": line.exhausted,
        "overridden": line.overridden,
    }


async def flow_status(store: Any) -> dict[str, Any] | None:
    """Budgets and cooling providers for ``status`` (``None``: the store keeps no counters)."""
    counters = counters_or_none(store)
    if counters is None:
        return None
    now = datetime.now(UTC)
    read = await counters.usage(limit=READ)
    lines = sorted(
        (u for u in read if current(u, now)),
        key=lambda u: (not u.exhausted, -share_used(u), u.budget, u.key),
    )
    exhausted = [u for u in lines if u.exhausted]
    shown = exhausted[:SHOWN_EXHAUSTED] + [u for u in lines if not u.exhausted][:SHOWN_USED]
    cooling = [
        {"provider": p.provider, "cooling_until": p.cooling_until.isoformat()}
        for p in await counters.providers()
        if p.cooling_until is not None and p.cooling_until > now
    ]
    return {
        "lines": [line_json(u) for u in shown],
        "current": len(lines),
        "exhausted": len(exhausted),
        "more": len(lines) - len(shown),
        "complete": len(read) < READ,
        "cooling_providers": cooling,
    }


def _amount(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def print_flow_status(flow: dict[str, Any] | None) -> None:
    if flow is None:
        out.print("budgets            this store keeps no budget counters")
        return
    at_least = "" if flow["complete"] else "at least "
    out.print(
        f"budgets            {at_least}{flow['current']} line(s) in their current window,"
        f" {at_least}{flow['exhausted']} exhausted",
        markup=False,
    )
    if flow["lines"]:
        print_table(
            ["budget", "key", "window", "used", "reserved", "limit", "remaining", "exhausted"],
            [
                [
                    u["budget"],
                    u["key"],
                    u["window"] + ("" if u["window_end"] is None else f" to {u['window_end']}"),
                    _pair(u["tokens_used"], u["cost_used"], u["cost_limit"]),
                    _pair(u["tokens_reserved"], u["cost_reserved"], u["cost_limit"]),
                    _pair(u["tokens_limit"], u["cost_limit"], u["cost_limit"])
                    + (" (operator)" if u["overridden"] else ""),
                    _pair(u["tokens_left"], u["cost_left"], u["cost_limit"]),
                    "yes" if u["exhausted"] else "no",
                ]
                for u in flow["lines"]
            ],
            ids=("budget", "key"),
        )
    if flow["more"]:
        out.print(
            f"  … and {flow['more']} more line(s) (intention-kernel budgets usage lists them)"
        )
    cooling = flow["cooling_providers"]
    names = ", ".join(f"{p['provider']} until {p['cooling_until']}" for p in cooling)
    out.print(f"cooling providers  {names or 'none'}", markup=False)


def _pair(tokens: float | None, cost: float | None, cost_limit: float | None) -> str:
    """Tokens, and the cost after them when the line has a cost limit."""
    shown = f"{_amount(tokens)} tokens" if tokens is not None else "- tokens"
    if cost_limit is not None:
        shown += f", cost {_amount(cost)}"
    return shown
