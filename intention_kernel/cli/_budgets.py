"""``budgets`` and ``providers``: what budgets have used and have left, an operator's new limit
(in force for every process at its next model call, without a deploy), and provider slots.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..contracts.errors import ErrorCode, UsageError
from ..contracts.flow import ANY_KEY, FlowCounters
from ._common import JsonOpt, StoreOpt, emit, open_store, out, print_table, run

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    group = typer.Typer(no_args_is_help=True, help="Budget usage and limits.")
    group.command("usage")(usage)
    group.command("set-limit")(set_limit)
    app.add_typer(group, name="budgets")
    app.command("providers")(providers)


def counters_of(store: Any) -> FlowCounters:
    found = getattr(store, "counters", None)
    if not isinstance(found, FlowCounters):
        raise UsageError(
            "this store has no budget counters", code=ErrorCode.NOT_SUPPORTED, context={}
        )
    return found


def _amount(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def usage(
    store: StoreOpt = None,
    budget: Annotated[str | None, typer.Option(help="Only this budget.")] = None,
    key: Annotated[str | None, typer.Option(help="Only this key (tenant, agent, thread).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many lines.")] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Each budget line per window, newest first: used, reserved, limit in force, left."""

    async def body() -> Any:
        async with open_store(store) as opened:
            return await counters_of(opened).usage(budget=budget, key=key, limit=limit)

    lines = run(as_json, body)

    def human() -> None:
        if not lines:
            out.print("no budget has been used")
            return
        print_table(
            ["budget", "key", "window", "tokens used", "reserved", "limit", "left", "cost used"],
            [
                [
                    u.budget,
                    u.key,
                    "all" if u.window_end is None else f"{u.window_start:%Y-%m-%d %H:%M:%S}Z",
                    str(u.tokens_used),
                    str(u.tokens_reserved),
                    _amount(u.tokens_limit) + (" (operator)" if u.overridden else ""),
                    _amount(u.tokens_left),
                    f"{u.cost_used:g}" + ("" if u.cost_limit is None else f" of {u.cost_limit:g}"),
                ]
                for u in lines
            ],
            ids=("budget", "key"),
        )

    emit(as_json, lines, human)


def set_limit(
    budget: Annotated[str, typer.Argument(help="The budget's name.")],
    store: StoreOpt = None,
    key: Annotated[str, typer.Option(help="One key, or '*' for all.")] = ANY_KEY,
    tokens: Annotated[int | None, typer.Option(help="The new token limit.")] = None,
    cost: Annotated[float | None, typer.Option(help="The new cost limit.")] = None,
    actor: Annotated[str, typer.Option(help="Who sets it (kept with it).")] = "operator",
    note: Annotated[str, typer.Option(help="Why (kept with it).")] = "set from the command line",
    as_json: JsonOpt = False,
) -> None:
    """Replace a budget's limit in the store: every process uses it from its next call."""

    async def body() -> Any:
        async with open_store(store) as opened:
            return await counters_of(opened).set_limit(
                budget, key, tokens=tokens, cost=cost, actor=actor, note=note
            )

    stored = run(as_json, body)

    def human() -> None:
        out.print(
            f"{stored.budget} [{stored.key}]: tokens {_amount(stored.tokens)},"
            f" cost {_amount(stored.cost)} (set by {stored.actor})",
            markup=False,
        )

    emit(as_json, stored, human)


def providers(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Providers with calls in flight, waiting calls, starts this minute or a cool-down."""

    async def body() -> Any:
        async with open_store(store) as opened:
            return await counters_of(opened).providers()

    found = run(as_json, body)

    def human() -> None:
        if not found:
            out.print("no provider is in use, waited for or cooling down")
            return
        print_table(
            ["provider", "in flight", "waiting", "started this minute", "cooling until"],
            [
                [
                    p.provider,
                    str(p.in_use),
                    str(p.waiting),
                    str(p.started_this_minute),
                    "-" if p.cooling_until is None else p.cooling_until.isoformat(),
                ]
                for p in found
            ],
            ids=("provider",),
        )

    emit(as_json, found, human)
