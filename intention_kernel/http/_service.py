"""``Service``: what the HTTP routes share (the agent, the store for reads, auth, limits, the
running turns, the turn inbox and its in-process workers, the busy-thread policy), and the
checks every route makes of a request (the caller, the thread, the body)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import ClientDisconnect, Request

from ..contracts.durability import DurabilityStore
from ..contracts.errors import ConfigurationError, ErrorCode
from ..contracts.ids import validate_thread_id
from ..contracts.inbox import TurnInbox
from ..kernel import CompiledAgent
from ._auth import Authenticator, Authorizer, Principal, resolve
from ._problems import RETRY_SAME_KEY, HttpProblem
from ._running import RunningTurns
from ._workers import InProcessWorkers

__all__ = ["BUSY_POLICIES", "SERVICE_STATE", "Service"]

SERVICE_STATE = "intention_kernel"
"""``app.state.intention_kernel`` holds the ``Service`` (the server's shutdown hook uses it)."""

_ANONYMOUS = Principal("anonymous")

BUSY_POLICIES = ("enqueue", "reject", "wait")
"""What a turn for a busy thread does: queue behind it (submitted turns run in arrival order),
be refused at once (409 ``THREAD_BUSY``), or run directly, waiting for the thread's lease."""

WATCH_POLL = 0.25
"""How often a request following a turn looks at the store (others' progress, other
processes' commits); this process's own commits and progress wake it at once."""


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
        *,
        busy: str = "enqueue",
        workers: int = 1,
        worker_settings: dict[str, Any] | None = None,
    ) -> None:
        if busy not in BUSY_POLICIES:
            raise ConfigurationError(
                f"busy must be one of {', '.join(BUSY_POLICIES)}", context={"setting": "busy"}
            )
        self.agent = agent
        self.store = store
        self.authenticate = authenticate
        self.authorize = authorize
        self.max_body_bytes = max_body_bytes
        self.turn_timeout = turn_timeout
        self.shutdown_grace = shutdown_grace
        self.busy = busy
        self.turns = RunningTurns()
        self.inbox: TurnInbox | None = agent.inbox
        settings = dict(worker_settings or {})
        self.workers = InProcessWorkers(agent, workers, settings, shutdown_grace)
        poll = settings.get("poll_interval")
        fine = isinstance(poll, int | float) and not isinstance(poll, bool) and poll > 0
        self.watch_poll = min(float(poll), WATCH_POLL) if fine else WATCH_POLL  # type: ignore[arg-type]

    @property
    def submits(self) -> bool:
        """Whether turns are submitted to the inbox (``enqueue`` and ``reject`` with a store
        that has one) rather than run directly."""
        return self.inbox is not None and self.busy != "wait"

    def start(self) -> None:
        """The application started: the in-process workers start claiming."""
        self.workers.start()

    def begin_shutdown(self) -> asyncio.Task[None]:
        """Readiness answers 503 and new turns are refused; the workers stop claiming; running
        turns (and the requests following them) get the grace, then are cancelled. Called by
        the server when it is told to stop (idempotent)."""
        self.workers.stop()
        return self.turns.drain(self.shutdown_grace, self.workers.tasks)

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

    async def body(
        self, request: Request, members: tuple[str, ...] = ("text", "selection")
    ) -> dict[str, Any]:
        """The JSON object of the body, at most ``max_body_bytes``, with only ``members``."""
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
        unknown = sorted(set(parsed) - set(members))
        if unknown:
            raise HttpProblem(
                422,
                str(ErrorCode.INVALID_INPUT),
                f"the body has members other than {' and '.join(members)}",
                extra={"unknown": unknown[:10]},
            )
        return parsed
