"""``create_inspector``: server-rendered pages for operators, over a store's public methods;
the route table and the page for an unknown path or a failure.

Why server-rendered and small: the pages must work without a build step and without script
(a bit of script only shows or hides the value field), with a keyboard and a screen reader.
Every form carries the session's CSRF token and a POST from another origin is refused
(``_security``); each page lives in its own module (``_login``, ``_threads``, ``_receipts``,
``_requests``, ``_answers``, ``_budgets``, ``_schedules``, ``_deploy``).
"""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ...contracts.durability import DurabilityStore
from ...contracts.errors import ConfigurationError
from ...kernel import CompiledAgent
from .._auth import Authenticator, Authorizer, BearerTokens, allow_any
from ._answers import review_answer, run_answer
from ._budgets import budget_page, budgets, confirm_limit, set_limit
from ._deploy import deploy, run_deploy
from ._inspector import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_TURN_TIMEOUT,
    INSPECTOR_STATE,
    Inspector,
    ProviderKey,
)
from ._login import _verifier, home, login, login_page, logout
from ._receipts import confirm, queue, receipt_page, reconcile
from ._requests import act_on_request, confirm_request, request_page, requests
from ._schedules import schedules
from ._security import _page
from ._session import SessionCodec, SessionStore
from ._threads import old_thread_path, thread, threads

__all__ = ["INSPECTOR_STATE", "ProviderKey", "create_inspector"]

logger = logging.getLogger("intention_kernel.http.inspector")


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
    turn_timeout: float | None = DEFAULT_TURN_TIMEOUT,
) -> Starlette:
    """The operator's web inspector over ``store`` (see ``docs/inspector.md``).

    ``authenticate`` checks the token pasted at the login page (``BearerTokens`` or the
    service's callable), and again on every request of the session. Sessions live in this
    process (a restart logs everyone out; several instances need sticky sessions), last
    ``session_lifetime`` seconds and end at logout. ``agent`` gives the compatibility for the
    incompatible filter, the diagnosis and the deploy check, and lets operators answer the
    confirmation a thread waits on (the answer runs as a turn of the agent, bounded by
    ``turn_timeout`` seconds; ``None``: no bound). ``session_secret`` (32 bytes or more) signs
    the login form's cookie; without one, a secret is made per process.
    ``authorize(principal, thread_id, action)`` is asked with ``read`` (for every row and
    link shown), ``reconcile``, ``retry`` or ``cancel`` before an operator's action on a turn
    request, and ``answer`` before an operator's answer to a confirmation (a budget's limit
    is set by any operator: budgets are not a thread's).
    ``provider_key(receipt)`` shows the key the provider knows.
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
        agent=agent,
        turn_timeout=turn_timeout,
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
            Route("/requests", _page(requests), methods=["GET"]),
            Route("/request", _page(request_page), methods=["GET"]),
            Route(
                "/request/confirm",
                _page(confirm_request, post=True, operator=True),
                methods=["POST"],
            ),
            Route("/request", _page(act_on_request, post=True, operator=True), methods=["POST"]),
            Route(
                "/answer/confirm",
                _page(review_answer, post=True, operator=True),
                methods=["POST"],
            ),
            Route("/answer", _page(run_answer, post=True, operator=True), methods=["POST"]),
            Route("/budgets", _page(budgets), methods=["GET"]),
            Route("/budget", _page(budget_page), methods=["GET"]),
            Route(
                "/budget/confirm",
                _page(confirm_limit, post=True, operator=True),
                methods=["POST"],
            ),
            Route("/budget", _page(set_limit, post=True, operator=True), methods=["POST"]),
            Route("/schedules", _page(schedules), methods=["GET"]),
            Route("/deploy", _page(deploy), methods=["GET"]),
            Route("/deploy", _page(run_deploy, post=True, operator=True), methods=["POST"]),
            Mount("/static", app=static, name="static"),
        ],
        exception_handlers={HTTPException: _not_found, Exception: _not_found},
    )
    setattr(app.state, INSPECTOR_STATE, inspector)
    return app
