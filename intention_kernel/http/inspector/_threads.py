"""The threads pages: the list (searched, filtered, paged after a cursor) and one thread
(checkpoint, turns, receipts, turn requests, outbox, diagnosis).

Why every row passes ``authorize``: a page must not tell a principal which threads exist that
it may not read (ids, counts, a pager's cursor).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.errors import CheckpointCorruptError
from ...contracts.ids import validate_thread_id
from ...contracts.inspect import StoreInspector, ThreadSummary
from ...contracts.turns import DurableTurnResult
from ...kernel import Response as TurnResponse
from ...operations import diagnose_thread, redact
from ...operations._history import turn_answer
from .._turns import user_input
from ._answer_form import answer_section, is_answer_turn
from ._inspector import (
    _FILTERS,
    EVENTS_SHOWN,
    TURNS_SHOWN,
    Inspector,
    InspectorProblem,
    _base,
    _json,
    _thread_href,
)
from ._requests import thread_requests
from ._session import Session


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name) == "1"


async def threads(inspector: Inspector, request: Request, session: Session) -> Response:
    """Threads in id order, a page at a time after the cursor, searched and filtered."""
    store = inspector.inspector
    if store is None:
        raise InspectorProblem(501, "NOT_INSPECTABLE", "this store does not offer operator queries")
    prefix = request.query_params.get("q", "").strip()
    after = request.query_params.get("after", "") or None  # an id, exactly as linked
    filters = {name: _flag(request, name) for name in _FILTERS}
    options: dict[str, Any] = {}
    for name in ("uncertain", "pending", "corrupt"):
        if filters[name]:
            options[name] = True
    accepted = inspector.accepted()
    if filters["incompatible"]:
        if accepted is None:
            raise InspectorProblem(
                400,
                "NO_AGENT",
                "the incompatible filter needs the agent: serve the inspector with one",
            )
        options["fingerprint_not_in"] = accepted
    # Rows the principal may not read are skipped and the page filled from the next ones, so
    # the "Next page" cursor is always the id of a row shown on this page, and the link is
    # offered only when a readable row follows.
    shown: list[dict[str, Any]] = []
    beyond: list[ThreadSummary] = []  # fetched after the page was full
    cursor = after
    exhausted = False
    while len(shown) < inspector.page_size and not exhausted:
        rows = await store.list_threads(
            prefix=prefix or None, after=cursor, limit=inspector.page_size + 1, **options
        )
        exhausted = len(rows) <= inspector.page_size
        for n, summary in enumerate(rows):
            if len(shown) == inspector.page_size:
                beyond = rows[n:]
                break
            if await inspector.may(session, summary.thread_id, "read"):
                shown.append(_summary_row(summary, accepted))
        if rows:
            cursor = rows[-1].thread_id
    more = False
    if len(shown) == inspector.page_size:
        for summary in beyond:
            if await inspector.may(session, summary.thread_id, "read"):
                more = True
                break
        if not more and not exhausted and cursor is not None:
            more = await _readable_after(inspector, session, store, cursor, prefix, options)
    next_href = None
    if more and shown:
        query = {k: v for k, v in request.query_params.items() if k != "after"}
        query["after"] = shown[-1]["id"]
        next_href = f"{_base(request)}/threads?{urlencode(query)}"
    return inspector.render(
        request,
        "threads.html",
        {
            "title": "Threads",
            "rows": shown,
            "q": prefix,
            "after": after,
            "filters": filters,
            "agent_known": accepted is not None,
            "next_href": next_href,
            "first_href": f"{_base(request)}/threads?"
            + urlencode({k: v for k, v in request.query_params.items() if k != "after"}),
            "page_size": inspector.page_size,
        },
        session=session,
    )


async def _readable_after(
    inspector: Inspector,
    session: Session,
    store: StoreInspector,
    after: str,
    prefix: str,
    options: dict[str, Any],
) -> bool:
    """Whether a thread the principal may read follows ``after`` (a "Next page" link that
    leads to an empty page would tell that refused threads follow)."""
    cursor = after
    while True:
        rows = await store.list_threads(
            prefix=prefix or None, after=cursor, limit=inspector.page_size, **options
        )
        for summary in rows:
            if await inspector.may(session, summary.thread_id, "read"):
                return True
        if len(rows) < inspector.page_size:
            return False
        cursor = rows[-1].thread_id


def _summary_row(summary: ThreadSummary, accepted: list[str] | None) -> dict[str, Any]:
    incompatible = (
        accepted is not None
        and summary.fingerprint is not None
        and summary.fingerprint not in accepted
    )
    return {
        "id": summary.thread_id,
        "revision": summary.revision,
        "turns": summary.turns,
        "last_commit_at": summary.last_commit_at,
        "uncertain": summary.uncertain_receipts,
        "pending": getattr(summary, "pending_interaction", None),
        "fingerprint": summary.fingerprint,
        "incompatible": incompatible,
        "corrupt": summary.corrupt,
    }


def _number(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or int(raw) > 2**62:
        raise InspectorProblem(400, "INVALID_INPUT", f"{name} must be a whole number")
    return int(raw)


def _turn_row(stored: DurableTurnResult) -> dict[str, Any]:
    try:
        response = TurnResponse.model_validate(stored.response)
        text: str = response.text
        kind: str = str(response.kind)
        steps = [f"{s.capability_id}: {s.status}" for s in response.steps]
    except Exception:
        text, kind, steps = _json(stored.response), "stored", []
    return {
        "turn_id": stored.turn_id,
        "revision": stored.checkpoint.revision,
        "trace_id": stored.trace_id,
        "input": user_input(stored),
        "answer": turn_answer(stored),
        "response": text,
        "kind": kind,
        "steps": steps,
    }


async def thread(inspector: Inspector, request: Request, session: Session) -> Response:
    """One thread (``/thread?id=``): checkpoint, turns, receipts, outbox and the diagnosis,
    and the confirmation it waits on (answered by operators, ``_answers``)."""
    thread_id = validate_thread_id(request.query_params.get("id", ""))
    context = await thread_context(inspector, request, session, thread_id)
    answered = request.query_params.get("answered", "")
    if answered and is_answer_turn(answered):  # the redirect after an operator's answer
        stored = await inspector.store.get_turn(thread_id, answered)
        context["answered"] = None if stored is None else _turn_row(stored)
    return inspector.render(request, "thread.html", context, session=session)


async def thread_context(
    inspector: Inspector, request: Request, session: Session, thread_id: str
) -> dict[str, Any]:
    """What the thread page shows (``read`` on the thread checked here)."""
    await inspector.require(session, thread_id, "read")
    store = inspector.store
    corrupt: str | None = None
    checkpoint: KernelCheckpoint | None = None
    try:
        checkpoint = await store.load_checkpoint(thread_id)
    except CheckpointCorruptError as exc:
        corrupt = redact(exc.message)
    receipts = await store.list_receipts(thread_id=thread_id, limit=500)
    requests = await thread_requests(inspector, request, thread_id)
    if checkpoint is None and corrupt is None and not receipts and not (requests or {}).get("any"):
        raise InspectorProblem(404, "THREAD_NOT_FOUND", "no thread with this id in the store")
    turns: list[dict[str, Any]] = []
    turns_after = _number(request, "turns_after")
    head = checkpoint.revision if checkpoint is not None else 0
    if turns_after is None:
        turns_after = max(0, head - TURNS_SHOWN)
    if checkpoint is not None or corrupt is not None:
        stored = await store.list_turns(thread_id, after_revision=turns_after, limit=TURNS_SHOWN)
        turns = [_turn_row(t) for t in stored]
    events_after = _number(request, "events_after") or 0
    events = await store.read_outbox(
        thread_id=thread_id, after_position=events_after, limit=EVENTS_SHOWN + 1
    )
    more_events = len(events) > EVENTS_SHOWN
    events = events[:EVENTS_SHOWN]
    diagnosis = None
    lookup = inspector.inspector
    if lookup is not None:
        diagnosis = await diagnose_thread(
            store, lookup, thread_id, checkpoint, compat=inspector.compat
        )
    base = _thread_href(request, thread_id)
    return {
        "title": f"Thread {thread_id}",
        "thread_id": thread_id,
        "checkpoint": checkpoint,
        "corrupt": corrupt,
        "accepted": inspector.accepted(),
        "receipts": receipts,
        "turns": turns,
        "earlier_turns_href": (
            f"{base}&{urlencode({'turns_after': max(0, turns_after - TURNS_SHOWN)})}"
            if turns_after > 0
            else None
        ),
        "later_turns_href": (
            f"{base}&{urlencode({'turns_after': turns_after + TURNS_SHOWN})}"
            if turns_after + TURNS_SHOWN < head
            else None
        ),
        "events": events,
        "more_events_href": (
            f"{base}&{urlencode({'events_after': events[-1].position})}#outbox"
            if more_events and events
            else None
        ),
        "diagnosis": diagnosis,
        "requests": requests,
        "answer": await answer_section(inspector, session, thread_id, checkpoint),
        "answer_error": None,
        "answered": None,
    }


async def old_thread_path(request: Request) -> Response:
    """``/threads/{id}`` (links of earlier versions): the same page at ``/thread?id=``."""
    return RedirectResponse(_thread_href(request, request.path_params["thread_id"]), 303)
