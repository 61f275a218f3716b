"""``POST /v1/threads/{thread_id}/turns``: run the turn once, replay it, or stream it.

With a turn inbox (and the ``enqueue`` or ``reject`` busy policy) the turn is submitted and
followed (``_submitted``); with ``busy="wait"``, or a store without an inbox, it runs here, in
this request's task, as below.

Why the ``Idempotency-Key`` is the turn id: it is HTTP's way to say "do this once even if I
send it twice", and the kernel already promises exactly that for a repeated turn id. So a
retried request replays the committed turn (``Idempotent-Replayed: true``) and runs nothing;
the same key with another body is ``TURN_ID_REUSED``; a turn that timed out or was cancelled
tells the client to retry with the same key. A request's W3C ``traceparent`` is continued: the
turn's span is a child of the caller's.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..contracts.errors import ErrorCode
from ..contracts.ids import validate_turn_id
from ..kernel import StreamItem, TurnCompleted
from ..telemetry import continued_trace
from ._problems import HttpProblem, problem_for
from ._running import wait_out
from ._service import Service, _shutting_down
from ._sse import encode_event, encode_item
from ._submitted import answer, refuse_if_busy, submit_turn

__all__ = ["post_turn"]

_END = object()


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _fingerprint(body: dict[str, Any]) -> str:
    """What a request asks for, to tell a duplicate from a reuse before the store is asked."""
    return json.dumps(
        {"text": body.get("text", ""), "selection": body.get("selection")},
        sort_keys=True,
        separators=(",", ":"),
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
        "host_context": {"actor": principal.id, "request_id": uuid.uuid4().hex},
        "timeout": service.turn_timeout,
    }
    stream = "text/event-stream" in request.headers.get("accept", "")
    if service.submits:
        with continued_trace(request.headers):  # kept with the request: the worker continues it
            return await submit_turn(service, request, arguments, stream)
    if service.busy == "reject" and not service.turns.in_flight((thread_id, turn_id)):
        await refuse_if_busy(service, thread_id, turn_id)
    if stream:
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
    return answer(result, joined or result.replayed)


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
