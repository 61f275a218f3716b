"""``create_app``: the HTTP service of one compiled agent, as a Starlette application.

The route table and the settings' checks; the routes themselves are in ``_post_turn`` (running
or submitting a turn), ``_turn_routes`` (a turn's state and events) and ``_read_routes``
(reads and probes), what they share in ``_service``. Every error is an RFC 9457 problem
document. The application's lifespan starts the in-process workers and drains them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from ..contracts.durability import DurabilityStore
from ..contracts.errors import ConfigurationError
from ..contracts.receipts import EffectReceipt
from ..kernel import CompiledAgent
from ._auth import Authenticator, Authorizer, BearerTokens, allow_any
from ._external_route import complete_external
from ._post_turn import post_turn
from ._problems import HttpProblem, problem_for, problem_response
from ._read_routes import get_thread, healthz, list_turns, openapi, readyz
from ._service import SERVICE_STATE, Service
from ._turn_routes import get_turn, turn_events

__all__ = ["create_app"]

DEFAULT_MAX_BODY_BYTES = 131_072
DEFAULT_TURN_TIMEOUT = 60.0
DEFAULT_SHUTDOWN_GRACE = 20.0


def _guarded(
    handler: Callable[[Service, Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """A route whose every failure is a problem document (and never a traceback)."""

    async def endpoint(request: Request) -> Response:
        service: Service = getattr(request.app.state, SERVICE_STATE)
        try:
            return await handler(service, request)
        except Exception as exc:
            return problem_response(problem_for(exc), request.url.path)

    endpoint.__name__ = handler.__name__
    endpoint.__doc__ = handler.__doc__
    return endpoint


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no route, wrong method) as problem documents."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(status, "HTTP_ERROR")
    headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
    return problem_response(
        HttpProblem(status, code, "no such resource or method", headers=headers),
        request.url.path,
    )


async def _unexpected(request: Request, exc: Exception) -> Response:
    return problem_response(problem_for(exc), request.url.path)


def _reader(agent: CompiledAgent, store: DurabilityStore | None) -> DurabilityStore:
    candidate: object = store if store is not None else agent.durability
    if not all(callable(getattr(candidate, m, None)) for m in ("load_checkpoint", "list_turns")):
        raise ConfigurationError(
            "the service reads threads from a DurabilityStore: pass store=",
            context={"setting": "store"},
        )
    return cast(DurabilityStore, candidate)


def create_app(
    agent: CompiledAgent,
    *,
    store: DurabilityStore | None = None,
    authenticate: Authenticator | BearerTokens | None = None,
    authorize: Authorizer | None = None,
    allow_anonymous: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    turn_timeout: float | None = DEFAULT_TURN_TIMEOUT,
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
    inspector: bool = False,
    session_secret: bytes | str | None = None,
    provider_key: Callable[[EffectReceipt], str | None] | None = None,
    busy: str = "enqueue",
    workers: int = 1,
    worker_settings: Mapping[str, Any] | None = None,
) -> Starlette:
    """The HTTP service of ``agent`` (see ``docs/http.md``).

    ``store`` serves reads and readiness (default: the agent's durability). ``authenticate``
    is required: ``BearerTokens`` or a callable ``(request) -> Principal | None``; only
    ``allow_anonymous=True`` serves without one. ``authorize(principal, thread_id, action)``
    decides per thread (default: any authenticated principal). ``turn_timeout`` bounds a turn
    (``None``: no bound); ``shutdown_grace`` is what running turns get at shutdown.
    ``inspector=True`` mounts the operator's web inspector at ``/inspect`` (the same
    authentication, a login page and server-side sessions; ``session_secret`` signs the login
    form's cookie;
    ``provider_key(receipt)`` shows the key to look a write up at the provider, by default
    the agent's own from ``Kernel.compile(..., provider_key=)``; see ``docs/inspector.md``).

    When the agent's store has a turn inbox, a turn is submitted and followed to its commit
    (a client that disconnects cancels nothing) and ``workers`` in-process workers
    (``CompiledAgent.worker`` with ``worker_settings``; 0: none) run submitted turns during
    the application's lifespan. ``busy`` is the policy for a thread with a turn in progress:
    ``enqueue`` (run after it), ``reject`` (409 ``THREAD_BUSY``) or ``wait`` (run the turn
    directly in the request, waiting for the thread's lease).
    """
    if not isinstance(agent, CompiledAgent):
        raise ConfigurationError("create_app serves a CompiledAgent", context={"setting": "agent"})
    if authenticate is None and not allow_anonymous:
        raise ConfigurationError(
            "create_app needs authenticate= (BearerTokens or a callable); pass"
            " allow_anonymous=True to serve without authentication",
            context={"setting": "authenticate"},
        )
    if not isinstance(max_body_bytes, int) or max_body_bytes < 1024:
        raise ConfigurationError(
            "max_body_bytes must be at least 1024", context={"setting": "max_body_bytes"}
        )
    if turn_timeout is not None and not 0 < turn_timeout <= 86_400:
        raise ConfigurationError(
            "turn_timeout must be positive (at most a day) or None",
            context={"setting": "turn_timeout"},
        )
    if not 0 <= shutdown_grace <= 3600:
        raise ConfigurationError(
            "shutdown_grace must be from 0 to 3600 seconds", context={"setting": "shutdown_grace"}
        )
    service = Service(
        agent,
        _reader(agent, store),
        authenticate,
        authorize or allow_any,
        max_body_bytes,
        turn_timeout,
        shutdown_grace,
        busy=busy,
        workers=workers,
        worker_settings=dict(worker_settings or {}),
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service.start()
        yield
        await service.begin_shutdown()  # a server that did not say it stops: drain now

    mounted: list[BaseRoute] = []
    if inspector:
        if authenticate is None:
            raise ConfigurationError(
                "the inspector needs authenticate=: operators log in with their token",
                context={"setting": "inspector"},
            )
        from .inspector import create_inspector  # jinja2 is loaded only when it is served

        mounted.append(
            Mount(
                "/inspect",
                app=create_inspector(
                    service.store,
                    authenticate=authenticate,
                    agent=agent,
                    authorize=authorize,
                    session_secret=session_secret,
                    provider_key=provider_key if provider_key is not None else agent.provider_key,
                    turn_timeout=turn_timeout,
                ),
            )
        )
    app = Starlette(
        routes=[
            *mounted,
            Route("/v1/threads/{thread_id}/turns", _guarded(post_turn), methods=["POST"]),
            Route("/v1/threads/{thread_id}/turns", _guarded(list_turns), methods=["GET"]),
            Route("/v1/threads/{thread_id}/turns/{turn_id}", _guarded(get_turn), methods=["GET"]),
            Route(
                "/v1/threads/{thread_id}/turns/{turn_id}/events",
                _guarded(turn_events),
                methods=["GET"],
            ),
            Route(
                "/v1/threads/{thread_id}/external/{key}",
                _guarded(complete_external),
                methods=["POST"],
            ),
            Route("/v1/threads/{thread_id}", _guarded(get_thread), methods=["GET"]),
            Route("/healthz", _guarded(healthz), methods=["GET"]),
            Route("/readyz", _guarded(readyz), methods=["GET"]),
            Route("/openapi.json", _guarded(openapi), methods=["GET"]),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _unexpected},
        lifespan=lifespan,
    )
    setattr(app.state, SERVICE_STATE, service)
    return app
