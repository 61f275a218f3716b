"""What every inspector page shares: the store, the agent and its compatibility, auth, sessions,
the templates (escaped: nothing stored is marked safe) and the security headers of a page.

Why ids travel in query strings only: an id may hold ``/``, ``#``, ``?`` or be ``..``, which a
path segment cannot carry; every link to a thread or a receipt is built here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.requests import Request
from starlette.responses import HTMLResponse

from ...contracts.durability import DurabilityStore
from ...contracts.errors import KernelError
from ...contracts.flow import FlowCounters
from ...contracts.inbox import TurnInbox
from ...contracts.inspect import StoreInspector
from ...contracts.receipts import EffectReceipt, ReceiptStatus
from ...kernel import Compatibility, CompiledAgent
from ...operations import age
from .._auth import Authorizer, Principal, resolve
from ._session import Recheck, Session, SessionCodec, SessionStore

logger = logging.getLogger("intention_kernel.http.inspector")


INSPECTOR_STATE = "intention_kernel_inspector"
SESSION_COOKIE = "ik_inspector"
LOGIN_COOKIE = "ik_inspector_login"
DEFAULT_PAGE_SIZE = 50
DEFAULT_TURN_TIMEOUT = 60.0
"""How long an operator's answer may run (seconds), as the HTTP service's ``turn_timeout``."""
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
    """What the pages share: the store, the agent (and its compatibility), auth, sessions,
    templates."""

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
        *,
        agent: CompiledAgent | None = None,
        turn_timeout: float | None = DEFAULT_TURN_TIMEOUT,
    ) -> None:
        self.store = store
        self.compat = compat
        self.agent = agent
        """The served agent: an operator's answer to a confirmation runs as its turn."""
        self.turn_timeout = turn_timeout
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

    @property
    def inbox(self) -> TurnInbox | None:
        """The store's turn inbox, or ``None`` for a store without one."""
        try:
            found = getattr(self.store, "inbox", None)
        except KernelError:  # a store built without the inbox role says NOT_SUPPORTED
            return None
        return found if isinstance(found, TurnInbox) else None

    @property
    def counters(self) -> FlowCounters | None:
        """The store's budget counters, or ``None`` for a store without them."""
        try:
            found = getattr(self.store, "counters", None)
        except KernelError:  # a store built without the flow role says NOT_SUPPORTED
            return None
        return found if isinstance(found, FlowCounters) else None

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
            request_href=lambda thread_id, turn_id: _request_href(request, thread_id, turn_id),
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


def _receipt_href(request: Request, thread_id: str, key: str) -> str:
    return f"{_base(request)}/receipt?{urlencode({'thread': thread_id, 'key': key})}"


def _request_href(request: Request, thread_id: str, turn_id: str) -> str:
    return f"{_base(request)}/request?{urlencode({'thread': thread_id, 'turn': turn_id})}"


def _thread_href(request: Request, thread_id: str) -> str:
    """The thread's page: the id percent-encoded in the query (``/``, ``#``, ``..`` too)."""
    return f"{_base(request)}/thread?{urlencode({'id': thread_id})}"
