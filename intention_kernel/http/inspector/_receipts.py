"""Receipts and reconcile: the uncertain-writes queue, one receipt with its audit history,
and the two-step reconcile (a confirmation page showing exactly the record, then the write).

Why every decision goes through a confirmation page: a reconciliation tells the next turn what
the provider did; the operator sees the record (outcome, value, note, actor, key) before it is
written, and the audit history after. Viewers read; only operators reconcile.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, cast

from pydantic import JsonValue
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...contracts.errors import KernelError
from ...contracts.ids import validate_idempotency_key, validate_thread_id
from ...contracts.receipts import ReceiptStatus, ReconcileOutcome
from ...operations import redact
from ._inspector import _AWAITING, QUEUE_LIMIT, Inspector, InspectorProblem, _receipt_href
from ._security import _field, _form
from ._session import Session

logger = logging.getLogger("intention_kernel.http.inspector")


async def queue(inspector: Inspector, request: Request, session: Session) -> Response:
    """Every write waiting for an operator, oldest first, across threads."""
    rows = await inspector.store.list_receipts(status=ReceiptStatus.UNCERTAIN, limit=QUEUE_LIMIT)
    shown = []
    for r in rows:
        if not await inspector.may(session, r.thread_id, "read"):
            continue
        shown.append(
            {
                "receipt": r,
                "interrupted": r.status is ReceiptStatus.PREPARED,
                "provider_key": inspector.provider_key_of(r),
                "href": _receipt_href(request, r.thread_id, r.idempotency_key),
            }
        )
    return inspector.render(
        request,
        "queue.html",
        {
            "title": "Uncertain writes",
            "rows": shown,
            "limit": QUEUE_LIMIT,
            "full": len(rows) >= QUEUE_LIMIT,
        },
        session=session,
    )


def _ids(thread_id: str, key: str) -> tuple[str, str]:
    try:
        return validate_thread_id(thread_id), validate_idempotency_key(key)
    except KernelError:
        raise InspectorProblem(400, "INVALID_INPUT", "give a valid thread id and key") from None


async def _receipt_context(
    inspector: Inspector, request: Request, session: Session, thread_id: str, key: str
) -> dict[str, Any]:
    await inspector.require(session, thread_id, "read")
    receipt = await inspector.store.get_receipt(thread_id, key)
    if receipt is None:
        raise InspectorProblem(404, "RECEIPT_NOT_FOUND", "no receipt with this key on the thread")
    history = await inspector.store.reconciliations(thread_id=thread_id, idempotency_key=key)
    awaiting = receipt.status in _AWAITING
    may_reconcile = session.operator and await inspector.may(session, thread_id, "reconcile")
    return {
        "title": f"Receipt {key}",
        "receipt": receipt,
        "provider_key": inspector.provider_key_of(receipt),
        "history": history,
        "awaiting": awaiting,
        "can_reconcile": may_reconcile and awaiting,
        "can_correct": may_reconcile and not awaiting and bool(history),
        "operator": session.operator,
        "error": None,
        "recorded": request.query_params.get("recorded") == "1",
        "form": {"outcome": "", "value": "", "note": ""},
    }


async def receipt_page(inspector: Inspector, request: Request, session: Session) -> Response:
    thread_id, key = _ids(
        request.query_params.get("thread", ""), request.query_params.get("key", "")
    )
    context = await _receipt_context(inspector, request, session, thread_id, key)
    return inspector.render(request, "receipt.html", context, session=session)


class _Decision:
    """A reconcile form, checked: what will be recorded."""

    __slots__ = ("correct", "key", "note", "outcome", "thread_id", "value", "value_text")

    def __init__(self, form: Mapping[str, str]) -> None:
        self.thread_id, self.key = _ids(_field(form, "thread"), _field(form, "key"))
        outcome = _field(form, "outcome")
        self.note = _field(form, "note").strip()
        self.value_text = _field(form, "value").strip()
        self.correct = _field(form, "correct") == "1"
        self.value: JsonValue = None
        if outcome not in ("completed", "not_applied"):
            raise _FormError("OUTCOME_REQUIRED", "choose whether the write happened or not")
        self.outcome = cast(ReconcileOutcome, outcome)
        if outcome == "completed":
            if not self.value_text:
                raise _FormError(
                    "VALUE_REQUIRED",
                    "a completed write needs the provider's result as JSON (null if it"
                    " returned nothing): the next turn replays it",
                )
            try:
                self.value = json.loads(self.value_text)
            except (ValueError, RecursionError) as exc:
                raise _FormError("INVALID_JSON", f"the value is not valid JSON: {exc}") from None
        elif self.value_text:
            raise _FormError("INVALID_OUTCOME", "a value goes with a completed write only")
        if not self.note:
            raise _FormError("NOTE_REQUIRED", "write down the evidence: what you checked")
        if len(self.note) > 4000:
            raise _FormError("NOTE_TOO_LONG", "the note is at most 4000 characters")

    def canonical_value(self) -> str:
        return json.dumps(self.value, ensure_ascii=False, sort_keys=True)


class _FormError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def _form_again(
    inspector: Inspector,
    request: Request,
    session: Session,
    form: Mapping[str, str],
    code: str,
    message: str,
    status: int,
) -> Response:
    thread_id, key = _ids(_field(form, "thread"), _field(form, "key"))
    context = await _receipt_context(inspector, request, session, thread_id, key)
    context["error"] = {"code": code, "message": message}
    context["form"] = {
        "outcome": _field(form, "outcome"),
        "value": _field(form, "value"),
        "note": _field(form, "note"),
    }
    return inspector.render(request, "receipt.html", context, status=status, session=session)


async def confirm(inspector: Inspector, request: Request, session: Session) -> Response:
    """The record that will be written, to be confirmed (nothing is written here)."""
    form = await _form(request)
    try:
        decision = _Decision(form)
    except _FormError as exc:
        return await _form_again(inspector, request, session, form, exc.code, exc.message, 422)
    await inspector.require(session, decision.thread_id, "reconcile")
    context = await _receipt_context(inspector, request, session, decision.thread_id, decision.key)
    if not (context["can_reconcile"] or (decision.correct and context["can_correct"])):
        return await _form_again(
            inspector,
            request,
            session,
            form,
            "NOT_AWAITING",
            f"this receipt is {context['receipt'].status} and waits for no reconciliation",
            409,
        )
    context.update(
        {
            "title": "Confirm the reconciliation",
            "decision": decision,
            "actor": session.principal.id,
            "supersedes": context["history"][-1] if decision.correct else None,
        }
    )
    return inspector.render(request, "confirm.html", context, session=session)


async def reconcile(inspector: Inspector, request: Request, session: Session) -> Response:
    """Record the confirmed decision, with the operator as the actor."""
    form = await _form(request)
    try:
        decision = _Decision(form)
    except _FormError as exc:
        return await _form_again(inspector, request, session, form, exc.code, exc.message, 422)
    if _field(form, "confirmed") != "1":
        return await _form_again(
            inspector, request, session, form, "NOT_CONFIRMED", "confirm the record first", 422
        )
    await inspector.require(session, decision.thread_id, "reconcile")
    try:
        await inspector.store.reconcile(
            decision.thread_id,
            decision.key,
            decision.outcome,
            **({"value": decision.value} if decision.outcome == "completed" else {}),
            note=decision.note,
            actor=session.principal.id,
            correct=decision.correct,
        )
    except KernelError as exc:
        return await _form_again(
            inspector, request, session, form, str(exc.code), redact(exc.message), 409
        )
    logger.info(
        "reconciled %s on %s as %s by %s",
        decision.key,
        decision.thread_id,
        decision.outcome,
        session.principal.id,
    )
    href = _receipt_href(request, decision.thread_id, decision.key) + "&recorded=1"
    return RedirectResponse(href, status_code=303)
