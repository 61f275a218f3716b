"""``create_app``: the HTTP service of one compiled agent, as a Starlette application.

Why the ``Idempotency-Key`` is the turn id: it is HTTP's way to say "do this once even if I
send it twice", and the kernel already promises exactly that for a repeated turn id. So a
retried request replays the committed turn (``Idempotent-Replayed: true``) and runs nothing;
the same key with another body is ``TURN_ID_REUSED``; a turn that timed out or was cancelled
tells the client to retry with the same key. Every error is an RFC 9457 problem document.
A request's W3C ``traceparent`` is continued: the turn's span is a child of the caller's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any, cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route

from ..contracts.durability import DurabilityStore
from ..contracts.errors import ConfigurationError, ErrorCode
from ..contracts.ids import validate_thread_id, validate_turn_id
from ..contracts.receipts import EffectReceipt
from ..kernel import CompiledAgent, StreamItem, TurnCompleted, TurnResult
from ..telemetry import continued_trace
from ._auth import Authenticator, Authorizer, BearerTokens, Principal, allow_any, resolve
from ._openapi import openapi_document
from ._problems import RETRY_SAME_KEY, HttpProblem, problem_for, problem_response
from ._running import RunningTurns, wait_out
from ._sse import encode_event, encode_item
from ._turns import stored_turn_json, thread_body, turn_body

__all__ = ["SERVICE_STATE", "Service", "create_app"]

logger = logging.getLogger("intention_kernel.http")

SERVICE_STATE = "intention_kernel"
"""``app.state.intention_kernel`` holds the ``Service`` (the server's shutdown hook uses it)."""

DEFAULT_MAX_BODY_BYTES = 131_072
DEFAULT_TURN_TIMEOUT = 60.0
DEFAULT_SHUTDOWN_GRACE = 20.0
MAX_PAGE = 100
_ANONYMOUS = Principal("anonymous")
_END = object()


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _shutting_down() -> HttpProblem:
    return HttpProblem(
        503,
        "SHUTTING_DOWN",
        f"this instance is shutting down; {RETRY_SAME_KEY} (any instance can serve the thread)",
        retryable=True,
    )


class Service:
    """What the routes share: the agent, the store for reads, auth, limits, running turns."""

    def __init__(
        self,
        agent: CompiledAgent,
        store: DurabilityStore,
        authenticate: Authenticator | None,
        authorize: Authorizer,
        max_body_bytes: int,
        turn_timeout: float | None,
        shutdown_grace: float,
    ) -> None:
        self.agent = agent
        self.store = store
        self.authenticate = authenticate
        self.authorize = authorize
        self.max_body_bytes = max_body_bytes
        self.turn_timeout = turn_timeout
        self.shutdown_grace = shutdown_grace
        self.turns = RunningTurns()

    def begin_shutdown(self) -> asyncio.Task[None]:
        """Readiness answers 503 and new turns are refused; running turns get the grace, then
        are cancelled. Called by the server when it is told to stop (idempotent)."""
        return self.turns.drain(self.shutdown_grace)

    # ------------------------------------------------------------------ requests

    async def principal(self, request: Request) -> Principal:
        if self.authenticate is None:
            return _ANONYMOUS
        found = await resolve(self.authenticate(request))
        if found is None:
            raise HttpProblem(
                401,
                "UNAUTHENTICATED",
                "a valid bearer token is required",
                headers={"WWW-Authenticate": 'Bearer realm="intention-kernel"'},
            )
        if not isinstance(found, Principal):
            raise TypeError("authenticate must return a Principal or None")
        return found

    async def thread(self, request: Request, action: str) -> tuple[Principal, str]:
        """The caller and the thread of the path, once the caller may ``action`` on it."""
        principal = await self.principal(request)
        thread_id = validate_thread_id(request.path_params["thread_id"])
        if not await resolve(self.authorize(principal, thread_id, action)):
            raise HttpProblem(403, "FORBIDDEN", f"{principal.id} may not {action} on this thread")
        return principal, thread_id

    async def body(self, request: Request) -> dict[str, Any]:
        """The JSON object of the body, at most ``max_body_bytes``."""
        limit = self.max_body_bytes
        too_large = HttpProblem(
            413, str(ErrorCode.PAYLOAD_TOO_LARGE), f"the body is larger than {limit} bytes"
        )
        declared = request.headers.get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise too_large
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
        except ClientDisconnect:
            raise HttpProblem(400, "CLIENT_DISCONNECTED", "the body was not received") from None

        def refuse(constant: str) -> None:
            raise ValueError(constant)

        try:
            parsed = json.loads(b"".join(chunks), parse_constant=refuse)
        except (ValueError, RecursionError):
            raise HttpProblem(
                400, str(ErrorCode.INVALID_JSON), "the body is not a JSON document"
            ) from None
        if not isinstance(parsed, dict):
            raise HttpProblem(422, str(ErrorCode.INVALID_INPUT), "the body must be a JSON object")
        unknown = sorted(set(parsed) - {"text", "selection"})
        if unknown:
            raise HttpProblem(
                422,
                str(ErrorCode.INVALID_INPUT),
                "the body has members other than text and selection",
                extra={"unknown": unknown[:10]},
            )
        return parsed


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


def _fingerprint(body: dict[str, Any]) -> str:
    """What a request asks for, to tell a duplicate from a reuse before the store is asked."""
    return json.dumps(
        {"text": body.get("text", ""), "selection": body.get("selection")},
        sort_keys=True,
        separators=(",", ":"),
    )


def _answer(result: TurnResult, replayed: bool) -> JSONResponse:
    return JSONResponse(
        turn_body(result, replayed),
        headers={"Idempotent-Replayed": "true" if replayed else "false"},
    )


async def post_turn(service: Service, request: Request) -> Response:
    """Run the turn named by ``Idempotency-Key``, or replay it."""
    principal, thread_id = await service.thread(request, "turn")
    key = request.headers.get("idempotency-key")
    if key is None:
        raise HttpProblem(
            400,
            "IDEMPOTENCY_KEY_REQUIRED",
            "send the turn's id as the Idempotency-Key header (the same one on every retry)",
        )
    turn_id = validate_turn_id(key)
    body = await service.body(request)
    if service.turns.draining:
        raise _shutting_down()
    selection = body.get("selection")
    text = body.get("text", "")
    arguments: dict[str, Any] = {
        "thread_id": thread_id,
        "turn_id": turn_id,
        "text": text,
        "selection": selection,
        "host_context": {"actor": principal.id},
        "timeout": service.turn_timeout,
    }
    if "text/event-stream" in request.headers.get("accept", ""):
        return await _stream(service, request, arguments)
    fingerprint = _fingerprint(body)
    with continued_trace(request.headers):  # the turn's task runs in the caller's trace
        flight, joined = service.turns.join_or_start(
            (thread_id, turn_id), fingerprint, service.agent.run(**arguments)
        )
    if joined and flight.fingerprint != fingerprint:
        raise HttpProblem(
            409,
            str(ErrorCode.TURN_ID_REUSED),
            "this Idempotency-Key is in use for another request",
        )
    task = flight.task
    await asyncio.wait({task})  # the turn goes on if this request is cancelled
    if task.cancelled():
        raise _shutting_down()
    error = task.exception()
    if error is not None:
        raise error
    result = task.result()
    return _answer(result, joined or result.replayed)


async def _stream(service: Service, request: Request, arguments: dict[str, Any]) -> Response:
    """The turn as server-sent events; errors before the first item keep their status."""
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def produce() -> None:
        try:
            stream = cast(AsyncGenerator[StreamItem, None], service.agent.stream(**arguments))
            async with aclosing(stream) as items:
                async for item in items:
                    queue.put_nowait(item)
        except Exception as exc:
            queue.put_nowait(_Failed(exc))
        finally:
            queue.put_nowait(_END)

    with continued_trace(request.headers):
        task = service.turns.track(produce())
    try:
        first = await queue.get()
    except BaseException:
        task.cancel()
        await wait_out(task)
        raise
    if isinstance(first, _Failed):
        raise first.error
    if first is _END:
        raise _shutting_down()

    async def frames() -> AsyncIterator[bytes]:
        item: Any = first
        try:
            while True:
                if item is _END:
                    yield encode_event("error", _shutting_down().document())
                    return
                if isinstance(item, _Failed):
                    yield encode_event("error", problem_for(item.error).document())
                    return
                yield encode_item(cast(StreamItem, item))
                if isinstance(item, TurnCompleted):
                    return
                item = await queue.get()
        finally:
            if not task.done():  # the client left: cancel the turn as a cancelled run is
                task.cancel()
                await wait_out(task)

    return StreamingResponse(
        frames(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _page_number(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise HttpProblem(
            400,
            str(ErrorCode.INVALID_INPUT),
            f"{name} must be a whole number from {low} to {high}",
            extra={"field": name},
        )
    return int(raw)


async def get_thread(service: Service, request: Request) -> Response:
    """Where a thread stands: checkpoint summary and pending interaction."""
    _, thread_id = await service.thread(request, "read")
    checkpoint = await service.store.load_checkpoint(thread_id)
    if checkpoint is None:
        raise HttpProblem(404, "THREAD_NOT_FOUND", "no committed turn on this thread")
    return JSONResponse(thread_body(thread_id, checkpoint))


async def list_turns(service: Service, request: Request) -> Response:
    """Committed turns in commit order, ``limit`` at a time after revision ``after``."""
    _, thread_id = await service.thread(request, "read")
    after = _page_number(request, "after", 0, 0, 2**62)
    limit = _page_number(request, "limit", 20, 1, MAX_PAGE)
    turns = await service.store.list_turns(thread_id, after_revision=after, limit=limit + 1)
    if not turns and after == 0 and await service.store.load_checkpoint(thread_id) is None:
        raise HttpProblem(404, "THREAD_NOT_FOUND", "no committed turn on this thread")
    page = turns[:limit]
    more = len(turns) > limit
    return JSONResponse(
        {
            "turns": [stored_turn_json(t) for t in page],
            "next": page[-1].checkpoint.revision if more and page else None,
        }
    )


async def healthz(service: Service, request: Request) -> Response:
    """The process answers."""
    return JSONResponse({"status": "ok"})


async def readyz(service: Service, request: Request) -> Response:
    """Ready for turns: not shutting down, and the store answers a read."""
    if service.turns.draining:
        raise _shutting_down()
    try:
        async with asyncio.timeout(5):
            await service.store.load_checkpoint("readiness-probe")
    except Exception as exc:
        code = getattr(exc, "code", "STORE_UNAVAILABLE")
        logger.warning("readiness: the store did not answer (%s)", type(exc).__name__)
        raise HttpProblem(503, str(code), "the store does not answer", retryable=True) from None
    return JSONResponse({"status": "ready", "running_turns": len(service.turns)})


async def openapi(service: Service, request: Request) -> Response:
    """The OpenAPI 3.1 document of this service."""
    return JSONResponse(openapi_document())


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
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
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
                ),
            )
        )
    app = Starlette(
        routes=[
            *mounted,
            Route("/v1/threads/{thread_id}/turns", _guarded(post_turn), methods=["POST"]),
            Route("/v1/threads/{thread_id}/turns", _guarded(list_turns), methods=["GET"]),
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
