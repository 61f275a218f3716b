"""Login and logout: a pasted token checked by the service's own authenticator starts a
server-side session; logout ends it (a copied cookie opens nothing any more).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .._auth import Authenticator, BearerTokens, Principal, resolve
from ._inspector import (
    INSPECTOR_STATE,
    LOGIN_COOKIE,
    SESSION_COOKIE,
    Inspector,
    InspectorProblem,
    _base,
)
from ._security import _field, _form, _same_origin, _secure
from ._session import Recheck, Session, inspector_role


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
