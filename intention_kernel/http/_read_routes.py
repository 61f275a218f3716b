"""The read routes (a thread, its committed turns a page at a time), the health and readiness
probes, and the OpenAPI document: nothing here runs a turn."""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..contracts.errors import ErrorCode
from ._openapi import openapi_document
from ._problems import HttpProblem
from ._service import Service, _shutting_down
from ._turns import stored_turn_json, thread_body

__all__ = ["MAX_PAGE", "get_thread", "healthz", "list_turns", "openapi", "readyz"]

logger = logging.getLogger("intention_kernel.http")

MAX_PAGE = 100


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
    running = len(service.turns) + service.workers.running
    return JSONResponse({"status": "ready", "running_turns": running})


async def openapi(service: Service, request: Request) -> Response:
    """The OpenAPI 3.1 document of this service."""
    return JSONResponse(openapi_document())
