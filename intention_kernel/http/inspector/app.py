"""``create_inspector``: server-rendered pages for operators, over a store's public methods.

Why server-rendered and small: the pages must work without a build step and without script
(a bit of script only shows or hides the value field), with a keyboard and a screen reader.
Why every decision goes through a confirmation page: a reconciliation tells the next turn
what the provider did; the operator sees exactly the record (outcome, value, note, actor, key)
before it is written, and the audit history after. Viewers read; only operators reconcile.
Every form carries the session's CSRF token and a POST from another origin is refused.
Why every row and link passes ``authorize``: a page must not tell a principal which threads
exist that it may not read (ids, counts, a pager's cursor). Why ids travel in query strings
only: an id may hold ``/``, ``#``, ``?`` or be ``..``, which a path segment cannot carry.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit

from jinja2 import Environment, PackageLoader, StrictUndefined
from pydantic import JsonValue
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.durability import DurabilityStore
from ...contracts.errors import (
    CheckpointCorruptError,
    ConfigurationError,
    KernelError,
)
from ...contracts.ids import validate_idempotency_key, validate_thread_id
from ...contracts.inspect import StoreInspector, ThreadSummary
from ...contracts.receipts import EffectReceipt, ReceiptStatus, ReconcileOutcome
from ...contracts.turns import DurableTurnResult
from ...kernel.compat import Compatibility
from ...kernel.response import Response as TurnResponse
from ...kernel.runtime import CompiledAgent
from ...operations import age, compat_report, diagnose_thread, redact
from ...operations.history import turn_answer
from ..auth import Authenticator, Authorizer, BearerTokens, Principal, allow_any, resolve
from ..turns import user_input
from .session import Recheck, Session, SessionCodec, SessionStore, inspector_role

__all__ = ["INSPECTOR_STATE", "ProviderKey", "create_inspector"]

logger = logging.getLogger("intention_kernel.http.inspector")

INSPECTOR_STATE = "intention_kernel_inspector"
SESSION_COOKIE = "ik_inspector"
LOGIN_COOKIE = "ik_inspector_login"
DEFAULT_PAGE_SIZE = 50
QUEUE_LIMIT = 500
TURNS_SHOWN = 20
EVENTS_SHOWN = 50
_FILTERS = ("uncertain", "pending", "corrupt", "incompatible")
_AWAITING = (ReceiptStatus.UNCERTAIN, ReceiptStatus.PREPARED)

ProviderKey = Callable[[EffectReceipt], str | None]
"""``(receipt) -> str | None``: the key the host sent the provider for this receipt, to look
the write up in the provider's records (``None``: not known)."""

_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self';"
        " form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}


class InspectorProblem(Exception):
    """A refusal shown as a page: an HTTP status, a stable code and a plain message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2, default=str)


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(timespec="seconds")


class Inspector:
    """What the pages share: the store, the agent's compatibility, auth, sessions, templates."""

    def __init__(
        self,
        store: DurabilityStore,
        compat: Compatibility | None,
        verify: Callable[[str], Awaitable[tuple[Principal, Recheck] | None]],
        authorize: Authorizer,
        codec: SessionCodec,
        sessions: SessionStore,
        provider_key: ProviderKey | None,
        page_size: int,
    ) -> None:
        self.store = store
        self.compat = compat
        self.verify = verify
        self.authorize = authorize
        self.codec = codec
        self.sessions = sessions
        self.provider_key = provider_key
        self.page_size = page_size
        self.templates = Environment(
            loader=PackageLoader("intention_kernel.http.inspector", "templates"),
            autoescape=True,  # every stored text is escaped; nothing is marked safe
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters["age"] = age
        self.templates.filters["when"] = _when
        self.templates.filters["json"] = _json

    # ------------------------------------------------------------------ helpers

    @property
    def inspector(self) -> StoreInspector | None:
        return self.store if isinstance(self.store, StoreInspector) else None

    def accepted(self) -> list[str] | None:
        """Fingerprints the agent loads (its own, declared compatible, migrated from)."""
        if self.compat is None:
            return None
        return sorted(
            {self.compat.fingerprint, *self.compat.compatible_with, *self.compat.migrations}
        )

    def provider_key_of(self, receipt: EffectReceipt) -> str | None:
        if self.provider_key is None:
            return None
        try:
            return self.provider_key(receipt)
        except Exception:
            logger.warning("provider_key failed for a receipt", exc_info=True)
            return None

    def render(
        self,
        request: Request,
        name: str,
        context: dict[str, Any],
        *,
        status: int = 200,
        session: Session | None = None,
    ) -> HTMLResponse:
        base = request.scope.get("root_path", "").rstrip("/")
        page = self.templates.get_template(name).render(
            base=base,
            session=session,
            path=request.url.path,
            thread_href=lambda thread_id: _thread_href(request, thread_id),
            receipt_href=lambda thread_id, key: _receipt_href(request, thread_id, key),
            **context,
        )
        response = HTMLResponse(page, status_code=status)
        response.headers.update(_SECURITY_HEADERS)
        return response

    async def session(self, request: Request) -> Session | None:
        """The request's live session (looked up and its token checked again), or ``None``
        (also when the authenticator fails: no page is shown on a token not checked)."""
        try:
            return await self.sessions.get(request.cookies.get(SESSION_COOKIE))
        except Exception:
            logger.warning("the authenticator failed checking a session", exc_info=True)
            return None

    async def may(self, session: Session, thread_id: str, action: str) -> bool:
        return bool(await resolve(self.authorize(session.principal, thread_id, action)))

    async def require(self, session: Session, thread_id: str, action: str) -> None:
        if not await self.may(session, thread_id, action):
            raise InspectorProblem(
                403, "FORBIDDEN", f"{session.principal.id} may not {action} on this thread"
            )


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _same_origin(request: Request) -> bool:
    """A POST's ``Origin`` (or ``Referer``), when the browser sends one, is this server."""
    own = f"{request.url.scheme}://{request.url.netloc}"
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == own
    referer = request.headers.get("referer")
    if referer is not None:
        parts = urlsplit(referer)
        return f"{parts.scheme}://{parts.netloc}" == own
    return True


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


MAX_FORM_BYTES = 65_536


async def _form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (the forms' encoding), bounded; read
    once per request (the CSRF check reads it before the page does)."""
    cached: dict[str, str] | None = getattr(request.state, "form", None)
    if cached is not None:
        return cached
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise InspectorProblem(415, "INVALID_FORM", "the form must be URL-encoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise InspectorProblem(413, "INVALID_FORM", "the form is too large")
    try:
        pairs = parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=20
        )
    except (UnicodeDecodeError, ValueError):
        raise InspectorProblem(400, "INVALID_FORM", "the form could not be read") from None
    form = dict(pairs)
    request.state.form = form
    return form


def _field(form: Mapping[str, str], name: str) -> str:
    return form.get(name, "")


Page = Callable[[Inspector, Request, Session], Awaitable[Response]]


def _page(
    handler: Page, *, post: bool = False, operator: bool = False
) -> Callable[[Request], Awaitable[Response]]:
    """A page behind the session: a browser without one is sent to the login page; a POST
    must carry the session's CSRF token and come from this origin; ``operator`` pages refuse
    viewers."""

    async def endpoint(request: Request) -> Response:
        inspector: Inspector = getattr(request.app.state, INSPECTOR_STATE)
        session = await inspector.session(request)
        try:
            if session is None:
                if post:
                    raise InspectorProblem(401, "UNAUTHENTICATED", "log in first")
                target = request.url.path
                if request.url.query:
                    target += "?" + request.url.query
                query = urlencode({"next": target})
                return RedirectResponse(f"{_base(request)}/login?{query}", status_code=303)
            if post:
                form = await _form(request)
                if not _same_origin(request):
                    raise InspectorProblem(403, "CROSS_ORIGIN", "the form came from another site")
                if not hmac.compare_digest(
                    _field(form, "csrf").encode("utf-8"), session.csrf.encode("utf-8")
                ):
                    raise InspectorProblem(
                        403,
                        "CSRF_REJECTED",
                        "the form's security token is missing or stale: reload the page",
                    )
            if operator and not session.operator:
                raise InspectorProblem(
                    403,
                    "FORBIDDEN",
                    f"{session.principal.id} is a viewer: only operators may reconcile",
                )
            return await handler(inspector, request, session)
        except InspectorProblem as problem:
            return inspector.render(
                request,
                "error.html",
                {"code": problem.code, "message": problem.message},
                status=problem.status,
                session=session,
            )
        except KernelError as exc:
            status = 400 if str(exc.code).startswith("INVALID") else 409
            return inspector.render(
                request,
                "error.html",
                {"code": str(exc.code), "message": redact(exc.message)},
                status=status,
                session=session,
            )

    endpoint.__name__ = handler.__name__
    return endpoint


# ---------------------------------------------------------------------- login


def _next_target(request: Request, raw: str) -> str:
    """Where to go after login: a path of this inspector only (no open redirect)."""
    base = _base(request)
    if raw.startswith(f"{base}/") and not raw.startswith("//") and "\\" not in raw:
        return raw
    return f"{base}/threads"


async def login_page(request: Request) -> Response:
    inspector: Inspector = getattr(request.app.state, INSPECTOR_STATE)
    return _login_form(inspector, request, request.query_params.get("next", ""))


def _login_form(
    inspector: Inspector, request: Request, target: str, *, error: str = "", status: int = 200
) -> Response:
    token, cookie = inspector.codec.prelogin()
    response = inspector.render(
        request,
        "login.html",
        {"csrf": token, "next": _next_target(request, target), "error": error},
        status=status,
    )
    response.set_cookie(
        LOGIN_COOKIE,
        cookie,
        max_age=3600,
        path=_base(request) or "/",
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    return response


async def login(request: Request) -> Response:
    """Check the pasted token with the service's authenticator; start a session."""
    inspector: Inspector = getattr(request.app.state, INSPECTOR_STATE)
    try:
        form = await _form(request)
    except InspectorProblem as problem:
        return _login_form(inspector, request, "", error=problem.message, status=problem.status)
    target = _field(form, "next")
    if not _same_origin(request) or not inspector.codec.check_prelogin(
        request.cookies.get(LOGIN_COOKIE), _field(form, "csrf")
    ):
        return _login_form(
            inspector,
            request,
            target,
            error="The login form expired or came from another site: try again.",
            status=403,
        )
    verified = await inspector.verify(_field(form, "token"))
    if verified is None:
        return _login_form(inspector, request, target, error="That token is not valid.", status=401)
    principal, recheck = verified
    if inspector_role(principal) is None:
        return _login_form(
            inspector,
            request,
            target,
            error=f"{principal.id} has neither the viewer nor the operator role.",
            status=403,
        )
    inspector.sessions.end(request.cookies.get(SESSION_COOKIE))  # no session is reused
    value, _ = inspector.sessions.start(principal, recheck)
    response = RedirectResponse(_next_target(request, target), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=inspector.codec.lifetime,
        path=_base(request) or "/",
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    response.delete_cookie(LOGIN_COOKIE, path=_base(request) or "/")
    return response


async def logout(inspector: Inspector, request: Request, session: Session) -> Response:
    """End the session on the server: its cookie, copied or not, opens nothing any more."""
    inspector.sessions.end(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse(f"{_base(request)}/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path=_base(request) or "/")
    return response


async def home(request: Request) -> Response:
    return RedirectResponse(f"{_base(request)}/threads", status_code=303)


# ---------------------------------------------------------------------- threads


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
    """One thread (``/thread?id=``): checkpoint, turns, receipts, outbox and the diagnosis."""
    thread_id = validate_thread_id(request.query_params.get("id", ""))
    await inspector.require(session, thread_id, "read")
    store = inspector.store
    corrupt: str | None = None
    checkpoint: KernelCheckpoint | None = None
    try:
        checkpoint = await store.load_checkpoint(thread_id)
    except CheckpointCorruptError as exc:
        corrupt = redact(exc.message)
    receipts = await store.list_receipts(thread_id=thread_id, limit=500)
    if checkpoint is None and corrupt is None and not receipts:
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
    return inspector.render(
        request,
        "thread.html",
        {
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
        },
        session=session,
    )


def _receipt_href(request: Request, thread_id: str, key: str) -> str:
    return f"{_base(request)}/receipt?{urlencode({'thread': thread_id, 'key': key})}"


def _thread_href(request: Request, thread_id: str) -> str:
    """The thread's page: the id percent-encoded in the query (``/``, ``#``, ``..`` too)."""
    return f"{_base(request)}/thread?{urlencode({'id': thread_id})}"


async def old_thread_path(request: Request) -> Response:
    """``/threads/{id}`` (links of earlier versions): the same page at ``/thread?id=``."""
    return RedirectResponse(_thread_href(request, request.path_params["thread_id"]), 303)


# ---------------------------------------------------------------------- receipts


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


# ---------------------------------------------------------------------- deploy check


async def deploy(inspector: Inspector, request: Request, session: Session) -> Response:
    """The deploy check's page; the scan itself is ``POST /deploy`` (``run_deploy``)."""
    return _deploy_page(inspector, request, session, None)


async def run_deploy(inspector: Inspector, request: Request, session: Session) -> Response:
    """The check-compat report of the served agent over the stored checkpoints the operator
    may read (a full-store scan: an operator's POST, logged with who ran it)."""
    lookup = inspector.inspector
    if inspector.compat is None or lookup is None:
        raise InspectorProblem(409, "NO_AGENT", "no agent or no operator queries: nothing to run")

    async def readable(thread_id: str) -> bool:
        return await inspector.may(session, thread_id, "read")

    logger.info("deploy check run by %s", session.principal.id)
    report = await compat_report(inspector.store, lookup, inspector.compat, include=readable)
    logger.info(
        "deploy check by %s: %d checkpoint(s) scanned, %d refused",
        session.principal.id,
        report.checkpoints,
        len(report.refused),
    )
    return _deploy_page(inspector, request, session, report)


def _deploy_page(inspector: Inspector, request: Request, session: Session, report: Any) -> Response:
    return inspector.render(
        request,
        "deploy.html",
        {
            "title": "Deploy check",
            "compat": inspector.compat,
            "accepted": inspector.accepted(),
            "inspectable": inspector.inspector is not None,
            "report": report,
            "operator": session.operator,
        },
        session=session,
    )


# ---------------------------------------------------------------------- the application


def _verifier(
    authenticate: Authenticator | BearerTokens,
) -> Callable[[str], Awaitable[tuple[Principal, Recheck] | None]]:
    """A pasted token checked by the service's own authenticator, and how a session checks it
    again on every request: ``BearerTokens`` by the token's digest (the token is not kept);
    a callable with the token itself, held in this process's memory for the session."""

    async def ask(token: str) -> Principal | None:
        scope = {
            "type": "http",
            "method": "GET",
            "path": "/",
            "headers": [(b"authorization", f"Bearer {token}".encode())],
            "query_string": b"",
        }
        found = await resolve(authenticate(Request(scope)))
        return found if isinstance(found, Principal) else None

    async def verify(token: str) -> tuple[Principal, Recheck] | None:
        token = token.strip()
        if not token or len(token) > 4096 or any(c in token for c in "\r\n"):
            return None
        recheck: Recheck
        if isinstance(authenticate, BearerTokens):
            digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
            tokens = authenticate

            async def recheck() -> Principal | None:
                return tokens.verify_digest(digest)

        else:

            async def recheck() -> Principal | None:
                return await ask(token)

        principal = await recheck()
        return None if principal is None else (principal, recheck)

    return verify


async def _not_found(request: Request, exc: Exception) -> Response:
    inspector: Inspector = getattr(request.app.state, INSPECTOR_STATE)
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status >= 500:
        logger.error("inspector page failed", exc_info=exc)
    message = {404: "no such page", 405: "this page does not take that method"}.get(
        status, "the page could not be shown"
    )
    return inspector.render(
        request,
        "error.html",
        {
            "code": {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(status, "ERROR"),
            "message": message,
        },
        status=status,
        session=await inspector.session(request),
    )


def create_inspector(
    store: DurabilityStore,
    *,
    authenticate: Authenticator | BearerTokens,
    agent: CompiledAgent | None = None,
    authorize: Authorizer | None = None,
    session_secret: bytes | str | None = None,
    session_lifetime: int = 8 * 3600,
    provider_key: ProviderKey | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> Starlette:
    """The operator's web inspector over ``store`` (see ``docs/inspector.md``).

    ``authenticate`` checks the token pasted at the login page (``BearerTokens`` or the
    service's callable), and again on every request of the session. Sessions live in this
    process (a restart logs everyone out; several instances need sticky sessions), last
    ``session_lifetime`` seconds and end at logout. ``agent`` gives the compatibility for the
    incompatible filter, the diagnosis and the deploy check. ``session_secret`` (32 bytes or
    more) signs the login form's cookie; without one, a secret is made per process.
    ``authorize(principal, thread_id, action)`` is asked with ``read`` (for every row and
    link shown) and ``reconcile``. ``provider_key(receipt)`` shows the key the provider knows.
    """
    if not callable(authenticate):
        raise ConfigurationError(
            "the inspector needs authenticate= (BearerTokens or a callable)",
            context={"setting": "authenticate"},
        )
    if not all(callable(getattr(store, m, None)) for m in ("load_checkpoint", "reconcile")):
        raise ConfigurationError(
            "the inspector reads a DurabilityStore: pass store=", context={"setting": "store"}
        )
    if not 1 <= page_size <= 500:
        raise ConfigurationError(
            "page_size must be from 1 to 500", context={"setting": "page_size"}
        )
    inspector = Inspector(
        store,
        None if agent is None else agent.compatibility,
        _verifier(authenticate),
        authorize or allow_any,
        SessionCodec(session_secret, session_lifetime),
        SessionStore(session_lifetime),
        provider_key,
        page_size,
    )
    static = StaticFiles(packages=[("intention_kernel.http.inspector", "static")])
    app = Starlette(
        routes=[
            Route("/", home, methods=["GET"]),
            Route("/login", login_page, methods=["GET"]),
            Route("/login", login, methods=["POST"]),
            Route("/logout", _page(logout, post=True), methods=["POST"]),
            Route("/threads", _page(threads), methods=["GET"]),
            Route("/thread", _page(thread), methods=["GET"]),
            Route("/threads/{thread_id:path}", old_thread_path, methods=["GET"]),
            Route("/receipts", _page(queue), methods=["GET"]),
            Route("/receipt", _page(receipt_page), methods=["GET"]),
            Route(
                "/reconcile/confirm",
                _page(confirm, post=True, operator=True),
                methods=["POST"],
            ),
            Route("/reconcile", _page(reconcile, post=True, operator=True), methods=["POST"]),
            Route("/deploy", _page(deploy), methods=["GET"]),
            Route("/deploy", _page(run_deploy, post=True, operator=True), methods=["POST"]),
            Mount("/static", app=static, name="static"),
        ],
        exception_handlers={HTTPException: _not_found, Exception: _not_found},
    )
    setattr(app.state, INSPECTOR_STATE, inspector)
    return app
