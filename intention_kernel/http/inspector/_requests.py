"""Turn requests: the inbox's dead, pending and running requests (store-wide and of one
thread), one request with its operator log, and an operator's retry or cancel, confirmed first.

Why the same two steps as reconcile: a retry runs a turn again and a cancel drops a turn a user
asked for; the operator sees the record (action, note, actor) before it is written, and the
request's operator log after. Viewers read; only operators act, and ``authorize`` is asked with
the action (``retry``, ``cancel``). Every row shown passes ``authorize(..., "read")``, and a
refused row is skipped, never counted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...contracts.errors import ErrorCode, KernelError
from ...contracts.ids import validate_thread_id, validate_turn_id
from ...contracts.inbox import InboxRequest, RequestState, TurnInbox
from ...operations import redact
from ._inspector import Inspector, InspectorProblem, _base, _request_href
from ._receipts import _FormError
from ._security import _field, _form
from ._session import Session

logger = logging.getLogger("intention_kernel.http.inspector")

SHOWN = (RequestState.DEAD, RequestState.PENDING, RequestState.RUNNING)
"""The states listed, the operator's work first (a done request is its turn's history)."""
ACTIONS: dict[str, frozenset[RequestState]] = {
    "retry": frozenset({RequestState.DEAD, RequestState.PENDING}),
    "cancel": frozenset({RequestState.PENDING}),
}
"""What an operator may do to a request, and in which states (as the inbox allows)."""
THREAD_ROWS = 20
"""Requests of each state shown on a thread's page."""
_STATE_LINKS = (("All", ""), ("Dead", "dead"), ("Pending", "pending"), ("Running", "running"))
_HEADINGS = {
    RequestState.DEAD: "Dead requests",
    RequestState.PENDING: "Pending requests",
    RequestState.RUNNING: "Running requests",
}


def _inbox(inspector: Inspector) -> TurnInbox:
    inbox = inspector.inbox
    if inbox is None:
        raise InspectorProblem(501, "NO_INBOX", "this store keeps no turn inbox")
    return inbox


def _ids(thread_id: str, turn_id: str) -> tuple[str, str]:
    try:
        return validate_thread_id(thread_id), validate_turn_id(turn_id)
    except KernelError:
        raise InspectorProblem(400, "INVALID_INPUT", "give a valid thread id and turn id") from None


def _row(found: InboxRequest, now: datetime) -> dict[str, Any]:
    return {
        "r": found,
        "waiting": found.state is RequestState.PENDING and found.not_before > now,
        "error": None if found.error is None else redact(found.error),
        "last_action": found.operator_log[-1] if found.operator_log else None,
    }


async def _readable(
    inspector: Inspector,
    session: Session,
    inbox: TurnInbox,
    state: RequestState,
    thread_id: str | None,
    after: int,
    want: int,
) -> tuple[list[InboxRequest], bool]:
    """Up to ``want`` requests in ``state`` after position ``after`` that the principal may
    read, and whether a readable one follows (so "Next page" never leads to an empty page)."""
    allowed: dict[str, bool] = {}
    shown: list[InboxRequest] = []
    cursor = after
    while True:
        batch = await inbox.list_requests(
            state=state, thread_id=thread_id, after_position=cursor, limit=want + 1
        )
        for found in batch:
            if found.thread_id not in allowed:
                allowed[found.thread_id] = await inspector.may(session, found.thread_id, "read")
            if allowed[found.thread_id]:
                if len(shown) == want:
                    return shown, True
                shown.append(found)
        if len(batch) <= want:
            return shown, False
        cursor = batch[-1].position


def _listing(request: Request, **query: str | int | None) -> str:
    chosen = {k: str(v) for k, v in query.items() if v is not None and v != ""}
    return f"{_base(request)}/requests" + (f"?{urlencode(chosen)}" if chosen else "")


async def requests(inspector: Inspector, request: Request, session: Session) -> Response:
    """Dead, pending and running requests (``state=`` one of them, paged after ``after=``;
    ``thread=`` one thread's), oldest first."""
    raw_thread = request.query_params.get("thread", "")
    thread_id = None
    if raw_thread:
        try:
            thread_id = validate_thread_id(raw_thread)
        except KernelError:
            raise InspectorProblem(400, "INVALID_INPUT", "give a valid thread id") from None
        await inspector.require(session, thread_id, "read")
    raw_state = request.query_params.get("state", "")
    if raw_state not in ("", *SHOWN):
        raise InspectorProblem(400, "INVALID_INPUT", "state is one of dead, pending, running")
    state = RequestState(raw_state) if raw_state else None
    raw_after = request.query_params.get("after", "") if state is not None else ""
    if raw_after and (not raw_after.isdigit() or int(raw_after) > 2**62):
        raise InspectorProblem(400, "INVALID_INPUT", "after must be a whole number")
    after = int(raw_after or 0)
    inbox = inspector.inbox
    sections: list[dict[str, Any]] = []
    now = datetime.now(UTC)
    for shown_state in SHOWN if state is None else (state,):
        if inbox is None:
            break
        rows, more = await _readable(
            inspector, session, inbox, shown_state, thread_id, after, inspector.page_size
        )
        more_href = None
        if more:  # the overview links to the state's own list, a state's list to its next page
            cursor = None if state is None else rows[-1].position
            more_href = _listing(request, state=shown_state, thread=thread_id, after=cursor)
        sections.append(
            {
                "state": str(shown_state),
                "heading": _HEADINGS[shown_state],
                "rows": [_row(r, now) for r in rows],
                "more_href": more_href,
            }
        )
    return inspector.render(
        request,
        "requests.html",
        {
            "title": "Turn requests",
            "inbox": inbox is not None,
            "thread_id": thread_id,
            "state": raw_state,
            "sections": sections,
            "states": [
                (label, _listing(request, state=value, thread=thread_id), value == raw_state)
                for label, value in _STATE_LINKS
            ],
            "first_href": _listing(request, state=state, thread=thread_id) if after else None,
            "page_size": inspector.page_size,
        },
        session=session,
    )


async def thread_requests(
    inspector: Inspector, request: Request, thread_id: str
) -> dict[str, Any] | None:
    """A thread's dead, pending and running requests, for its page (``None``: no inbox); the
    caller has checked that the principal may read the thread."""
    inbox = inspector.inbox
    if inbox is None:
        return None
    now = datetime.now(UTC)
    sections = []
    for state in SHOWN:
        found = await inbox.list_requests(state=state, thread_id=thread_id, limit=THREAD_ROWS + 1)
        sections.append(
            {
                "state": str(state),
                "heading": _HEADINGS[state],
                "rows": [_row(r, now) for r in found[:THREAD_ROWS]],
                "more_href": _listing(request, state=state, thread=thread_id)
                if len(found) > THREAD_ROWS
                else None,
            }
        )
    return {
        "sections": sections,
        "any": any(s["rows"] for s in sections),
        "href": _listing(request, thread=thread_id),
    }


async def _request_context(
    inspector: Inspector, request: Request, session: Session, thread_id: str, turn_id: str
) -> dict[str, Any]:
    inbox = _inbox(inspector)
    await inspector.require(session, thread_id, "read")
    found = await inbox.get(thread_id, turn_id)
    if found is None:
        raise InspectorProblem(404, "REQUEST_NOT_FOUND", "no turn request with these ids")
    actions = []
    if session.operator:
        for action, states in ACTIONS.items():
            if found.state in states and await inspector.may(session, thread_id, action):
                actions.append(action)
    return {
        "title": f"Request {turn_id}",
        "row": _row(found, datetime.now(UTC)),
        "r": found,
        "actions": actions,
        "operator": session.operator,
        "error": None,
        "recorded": request.query_params.get("recorded") == "1",
        "form": {"action": "", "note": ""},
    }


async def request_page(inspector: Inspector, request: Request, session: Session) -> Response:
    """One request (``/request?thread=&turn=``): its state, its error, its operator log, and
    for an operator the retry or cancel form."""
    thread_id, turn_id = _ids(
        request.query_params.get("thread", ""), request.query_params.get("turn", "")
    )
    context = await _request_context(inspector, request, session, thread_id, turn_id)
    return inspector.render(request, "request.html", context, session=session)


class _Order:
    """A retry or cancel form, checked: what will be recorded."""

    __slots__ = ("action", "note", "thread_id", "turn_id")

    def __init__(self, form: Mapping[str, str]) -> None:
        self.thread_id, self.turn_id = _ids(_field(form, "thread"), _field(form, "turn"))
        self.action = _field(form, "action")
        self.note = _field(form, "note").strip()
        if self.action not in ACTIONS:
            raise _FormError("ACTION_REQUIRED", "choose whether to retry or cancel the request")
        if not self.note:
            raise _FormError("NOTE_REQUIRED", "write down why: what you checked or fixed")
        if len(self.note) > 4000:
            raise _FormError("NOTE_TOO_LONG", "the note is at most 4000 characters")


async def _form_again(
    inspector: Inspector,
    request: Request,
    session: Session,
    form: Mapping[str, str],
    code: str,
    message: str,
    status: int,
) -> Response:
    thread_id, turn_id = _ids(_field(form, "thread"), _field(form, "turn"))
    context = await _request_context(inspector, request, session, thread_id, turn_id)
    context["error"] = {"code": code, "message": message}
    context["form"] = {"action": _field(form, "action"), "note": _field(form, "note")}
    return inspector.render(request, "request.html", context, status=status, session=session)


async def confirm_request(inspector: Inspector, request: Request, session: Session) -> Response:
    """The action that will be recorded, to be confirmed (nothing is written here)."""
    form = await _form(request)
    try:
        order = _Order(form)
    except _FormError as exc:
        return await _form_again(inspector, request, session, form, exc.code, exc.message, 422)
    await inspector.require(session, order.thread_id, order.action)
    context = await _request_context(inspector, request, session, order.thread_id, order.turn_id)
    if order.action not in context["actions"]:
        return await _form_again(
            inspector,
            request,
            session,
            form,
            str(ErrorCode.REQUEST_STATE_CONFLICT),
            f"a {context['r'].state} request cannot be given a {order.action}",
            409,
        )
    context.update({"title": "Confirm the action", "order": order, "actor": session.principal.id})
    return inspector.render(request, "request_confirm.html", context, session=session)


async def act_on_request(inspector: Inspector, request: Request, session: Session) -> Response:
    """Record the confirmed retry or cancel, with the operator as the actor."""
    form = await _form(request)
    try:
        order = _Order(form)
    except _FormError as exc:
        return await _form_again(inspector, request, session, form, exc.code, exc.message, 422)
    if _field(form, "confirmed") != "1":
        return await _form_again(
            inspector, request, session, form, "NOT_CONFIRMED", "confirm the action first", 422
        )
    await inspector.require(session, order.thread_id, order.action)
    inbox = _inbox(inspector)
    operate = inbox.retry if order.action == "retry" else inbox.cancel
    try:
        await operate(order.thread_id, order.turn_id, actor=session.principal.id, note=order.note)
    except KernelError as exc:
        code = str(exc.code)
        status = 400 if code.startswith("INVALID") else 404 if code.endswith("NOT_FOUND") else 409
        return await _form_again(
            inspector, request, session, form, code, redact(exc.message), status
        )
    logger.info(
        "%s of request %s on %s by %s",
        order.action,
        order.turn_id,
        order.thread_id,
        session.principal.id,
    )
    href = _request_href(request, order.thread_id, order.turn_id) + "&recorded=1"
    return RedirectResponse(href, status_code=303)
