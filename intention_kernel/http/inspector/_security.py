"""Security and forms: the session every page sits behind, the CSRF token and same-origin
check on every POST, the bounded form reader; a refusal (``InspectorProblem``, a store's
``KernelError``) is shown as the error page.

Why here and apart: one wrapper (``_page``) guards every page the same way, as a starlette
middleware would, so a page's handler only does its page's work.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...contracts.errors import KernelError
from ...operations import redact
from ._inspector import INSPECTOR_STATE, Inspector, InspectorProblem, _base
from ._session import Session


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
MAX_FORM_FIELDS = 200
"""Fields a form may send (an answer sends one per edited field)."""


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
            body.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=False,
            max_num_fields=MAX_FORM_FIELDS,
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
                    f"{session.principal.id} is a viewer: only operators may reconcile, retry,"
                    " cancel, answer or set a limit",
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
