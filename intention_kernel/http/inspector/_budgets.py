"""Budgets: each budget line's usage in its window (used, reserved, limit, remaining, window
end, the operator's limit when one is set), the providers' slots and cool-downs, and an
operator's new limit for a line, confirmed first.

Why a confirmation step: a new limit is in force for every process on the store at its next
model call; the operator sees the record (limits, note, actor) before it is written. Viewers
read; only operators set a limit. Budgets belong to tenants, agents and threads rather than to
one thread, so ``authorize`` (asked per thread) is not asked here: the operator role decides.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...contracts.errors import KernelError
from ...contracts.flow import ANY_KEY, BudgetUsage, FlowCounters, LimitOverride
from ...contracts.ids import validate_id
from ...operations import redact
from ._inspector import Inspector, InspectorProblem, _base
from ._receipts import _FormError
from ._security import _field, _form
from ._session import Session

logger = logging.getLogger("intention_kernel.http.inspector")

READ = 1000
"""Budget lines read per page view (newest window first): the most the store answers at once."""
MAX_TOKENS = 10**15
_ID_LENGTH = 256


def _counters(inspector: Inspector) -> FlowCounters:
    counters = inspector.counters
    if counters is None:
        raise InspectorProblem(501, "NO_COUNTERS", "this store keeps no budget counters")
    return counters


def _name(value: str, what: str) -> str:
    try:
        return validate_id(value, what, max_length=_ID_LENGTH)
    except KernelError:
        raise InspectorProblem(400, "INVALID_INPUT", f"give a valid {what}") from None


def _href(request: Request, target: str, **query: str | int | None) -> str:
    chosen = {k: str(v) for k, v in query.items() if v is not None and v != "" and v != 0}
    return f"{_base(request)}/{target}" + (f"?{urlencode(chosen)}" if chosen else "")


def _row(request: Request, u: BudgetUsage, now: datetime) -> dict[str, Any]:
    ended = u.window_end is not None and u.window_end <= now
    return {
        "u": u,
        "ended": ended,
        "exhausted": u.exhausted and not ended,
        "href": _href(request, "budget", budget=u.budget, key=u.key),
    }


async def budgets(inspector: Inspector, request: Request, session: Session) -> Response:
    """Budget lines, newest window first (``budget=`` one budget, ``exhausted=1`` only the
    exhausted ones in their current window, ``page=`` the page), and the providers."""
    raw_budget = request.query_params.get("budget", "").strip()
    chosen = _name(raw_budget, "budget name") if raw_budget else None
    only_exhausted = request.query_params.get("exhausted") == "1"
    raw_page = request.query_params.get("page", "1")
    if not raw_page.isdigit() or not 1 <= int(raw_page) <= READ:
        raise InspectorProblem(400, "INVALID_INPUT", "page must be a whole number from 1")
    page = int(raw_page)
    counters = inspector.counters
    rows: list[dict[str, Any]] = []
    providers: list[Any] = []
    complete = True
    if counters is not None:
        now = datetime.now(UTC)
        read = await counters.usage(budget=chosen, limit=READ)
        complete = len(read) < READ
        rows = [_row(request, u, now) for u in read]
        if only_exhausted:
            rows = [r for r in rows if r["exhausted"]]
        providers = await counters.providers()
    size = inspector.page_size
    shown = rows[(page - 1) * size : page * size]
    query = {"budget": chosen, "exhausted": "1" if only_exhausted else None}
    return inspector.render(
        request,
        "budgets.html",
        {
            "title": "Budgets",
            "counters": counters is not None,
            "rows": shown,
            "total": len(rows),
            "complete": complete,
            "budget": chosen or "",
            "only_exhausted": only_exhausted,
            "providers": providers,
            "next_href": _href(request, "budgets", **query, page=page + 1)
            if len(rows) > page * size
            else None,
            "previous_href": _href(request, "budgets", **query, page=page - 1)
            if page > 1
            else None,
            "now": datetime.now(UTC),
        },
        session=session,
    )


def _override(limits: list[LimitOverride], key: str) -> LimitOverride | None:
    """The operator's limit in force for ``key``: its own, else the budget's ``*`` one."""
    found = [o for o in limits if o.key == key] + [o for o in limits if o.key == ANY_KEY]
    return found[0] if found else None


async def _line_context(
    inspector: Inspector, request: Request, session: Session, budget: str, key: str
) -> dict[str, Any]:
    counters = _counters(inspector)
    found = await counters.usage(budget=budget, key=key, limit=1)
    if not found:
        raise InspectorProblem(404, "BUDGET_LINE_NOT_FOUND", "no budget line with this key")
    override = _override(await counters.limits(budget=budget), key)
    return {
        "title": f"Budget {budget} [{key}]",
        "row": _row(request, found[0], datetime.now(UTC)),
        "u": found[0],
        "override": override,
        "operator": session.operator,
        "error": None,
        "recorded": request.query_params.get("recorded") == "1",
        "form": {"tokens": "", "cost": "", "note": ""},
    }


async def budget_page(inspector: Inspector, request: Request, session: Session) -> Response:
    """One budget line (``/budget?budget=&key=``), its newest window, and for an operator the
    form to set its limit."""
    budget = _name(request.query_params.get("budget", ""), "budget name")
    key = _name(request.query_params.get("key", ""), "key")
    context = await _line_context(inspector, request, session, budget, key)
    return inspector.render(request, "budget.html", context, session=session)


def _tokens(text: str) -> int | None:
    if not text:
        return None
    if not text.isdigit() or not 0 < int(text) <= MAX_TOKENS:
        raise _FormError(
            "INVALID_TOKENS", f"the token limit is a whole number from 1 to {MAX_TOKENS}"
        )
    return int(text)


def _cost(text: str) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 < value <= MAX_TOKENS:
        raise _FormError("INVALID_COST", "the cost limit is a number more than 0")
    return value


class _Order:
    """A set-limit form, checked: what will be recorded."""

    __slots__ = ("budget", "cost", "key", "note", "tokens")

    def __init__(self, form: Mapping[str, str]) -> None:
        self.budget = _name(_field(form, "budget"), "budget name")
        self.key = _name(_field(form, "key"), "key")
        self.tokens = _tokens(_field(form, "tokens").strip())
        self.cost = _cost(_field(form, "cost").strip())
        self.note = _field(form, "note").strip()
        if self.tokens is None and self.cost is None:
            raise _FormError("LIMIT_REQUIRED", "give a token limit, a cost limit or both")
        if not self.note:
            raise _FormError("NOTE_REQUIRED", "write down why the limit changes")
        if len(self.note) > 2000:
            raise _FormError("NOTE_TOO_LONG", "the note is at most 2000 characters")


async def _form_again(
    inspector: Inspector,
    request: Request,
    session: Session,
    form: Mapping[str, str],
    code: str,
    message: str,
    status: int,
) -> Response:
    budget = _name(_field(form, "budget"), "budget name")
    key = _name(_field(form, "key"), "key")
    context = await _line_context(inspector, request, session, budget, key)
    context["error"] = {"code": code, "message": message}
    context["form"] = {name: _field(form, name) for name in ("tokens", "cost", "note")}
    return inspector.render(request, "budget.html", context, status=status, session=session)


async def confirm_limit(inspector: Inspector, request: Request, session: Session) -> Response:
    """The limit that will be recorded, to be confirmed (nothing is written here)."""
    form = await _form(request)
    try:
        order = _Order(form)
    except _FormError as exc:
        return await _form_again(inspector, request, session, form, exc.code, exc.message, 422)
    context = await _line_context(inspector, request, session, order.budget, order.key)
    context.update({"title": "Confirm the limit", "order": order, "actor": session.principal.id})
    return inspector.render(request, "budget_confirm.html", context, session=session)


async def set_limit(inspector: Inspector, request: Request, session: Session) -> Response:
    """Record the confirmed limit, with the operator as the actor."""
    form = await _form(request)
    try:
        order = _Order(form)
    except _FormError as exc:
        return await _form_again(inspector, request, session, form, exc.code, exc.message, 422)
    if _field(form, "confirmed") != "1":
        return await _form_again(
            inspector, request, session, form, "NOT_CONFIRMED", "confirm the limit first", 422
        )
    counters = _counters(inspector)
    try:
        await counters.set_limit(
            order.budget,
            order.key,
            tokens=order.tokens,
            cost=order.cost,
            actor=session.principal.id,
            note=order.note,
        )
    except KernelError as exc:
        code = str(exc.code)
        status = 400 if code.startswith("INVALID") else 409
        return await _form_again(
            inspector, request, session, form, code, redact(exc.message), status
        )
    logger.info("limit of budget %s [%s] set by %s", order.budget, order.key, session.principal.id)
    href = _href(request, "budget", budget=order.budget, key=order.key) + "&recorded=1"
    return RedirectResponse(href, status_code=303)
