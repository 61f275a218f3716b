"""Following a submitted turn through ``CompiledAgent.watch``: until its commit (the plain
answer), or as server-sent events whose ids are the watch's cursors (a stream, a rejoin).

Why the request only follows: the turn runs in a worker of any instance, so a client that
disconnects cancels nothing but its own following; it rejoins on any instance with the last
event id it saw (``Last-Event-ID``) and gets what it missed, then the result. Why a bound: a
request follows at most ``turn_timeout`` seconds (503 ``TURN_TIMEOUT``, or an ``error`` event),
the turn goes on and the same key (or a rejoin) gets its result later. A dead request is
answered as the failure that killed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response, StreamingResponse

from ..contracts.errors import ErrorCode, KernelError
from ..kernel import TextDelta, TurnCompleted, TurnResult
from ._problems import RETRY_SAME_KEY, HttpProblem, dead_problem, problem_for
from ._service import Service, _shutting_down
from ._sse import encode_comment, encode_event, encode_item

__all__ = ["follow_result", "follow_stream"]

logger = logging.getLogger("intention_kernel.http")

FIRST_WAIT = 1.0
"""Seconds a stream waits for its first item before it starts without one: a failure known by
then (an unknown turn, a foreign cursor, a request dead at once) keeps its status."""
KEEP_ALIVE = 15.0
"""Seconds between comment lines while a followed turn is quiet (proxies close idle streams)."""

_END = object()


class _Failed:
    __slots__ = ("problem",)

    def __init__(self, problem: HttpProblem) -> None:
        self.problem = problem


def still_running() -> HttpProblem:
    return HttpProblem(
        503,
        str(ErrorCode.TURN_TIMEOUT),
        "the turn did not commit in time; it goes on without this request: "
        f"{RETRY_SAME_KEY} (or follow its events) to get its result",
        retryable=True,
    )


async def _problem(service: Service, exc: Exception, thread_id: str, turn_id: str) -> HttpProblem:
    """The answer for a watch that failed; a dead request with its stored failure."""
    if (
        isinstance(exc, KernelError)
        and exc.code == ErrorCode.REQUEST_DEAD
        and service.inbox is not None
    ):
        with contextlib.suppress(KernelError):
            request = await service.inbox.get(thread_id, turn_id)
            if request is not None:
                # What the worker recorded is the operator's (a provider's words included).
                logger.warning(
                    "answered a dead turn request after %d attempt(s) (%s): %s",
                    request.attempts,
                    request.error_code,
                    request.error,
                )
                return dead_problem(request.error_code, request.error, request.attempts)
    return problem_for(exc)


async def _result(service: Service, thread_id: str, turn_id: str) -> TurnResult:
    try:
        async for watched in service.agent.watch(
            thread_id=thread_id, turn_id=turn_id, poll_interval=service.watch_poll
        ):
            if isinstance(watched.item, TurnCompleted):
                return watched.item.result
    except Exception as exc:
        raise await _problem(service, exc, thread_id, turn_id) from None
    raise HttpProblem(500, "INTERNAL", "the turn's watch ended without its result")


async def follow_result(service: Service, thread_id: str, turn_id: str) -> TurnResult:
    """The committed result of a submitted turn, within ``turn_timeout``."""
    task = service.turns.follow(_result(service, thread_id, turn_id))
    try:
        await asyncio.wait({task}, timeout=service.turn_timeout)
    finally:
        if not task.done():
            task.cancel()
    if not task.done():
        raise still_running()
    if task.cancelled():  # the drain: this instance stops, the turn does not
        raise _shutting_down()
    return task.result()


class _Encoder:
    """A followed turn's items as frames. ``collapse``: only the committed text and the result
    (a replay). Otherwise every item as it comes: ``watch`` settles the text deltas to the
    committed text, also after a rejoin (it knows what the client was shown up to its cursor)."""

    def __init__(self, replayed: bool, *, collapse: bool) -> None:
        self.replayed = replayed
        self.collapse = collapse

    def frames(self, watched: Any) -> list[bytes]:
        item = watched.item
        if isinstance(item, TurnCompleted):
            out = []
            if self.collapse:
                out.append(encode_item(TextDelta(item.result.response.text), watched.cursor))
            out.append(encode_item(item, watched.cursor, self.replayed))
            return out
        return [] if self.collapse else [encode_item(item, watched.cursor)]


async def follow_stream(
    service: Service,
    thread_id: str,
    turn_id: str,
    *,
    after: str | None,
    replayed: bool,
    collapse: bool = False,
) -> Response:
    """The turn's watch as server-sent events from the cursor ``after``; ``collapse`` sends a
    committed turn as one ``text.delta`` and ``turn.completed`` (a replayed request)."""
    queue: asyncio.Queue[Any] = asyncio.Queue()

    loop = asyncio.get_running_loop()
    limit = service.turn_timeout
    deadline = None if limit is None else loop.time() + limit

    async def produce() -> None:
        bound = asyncio.timeout_at(deadline)  # also when nobody reads the stream any more
        try:
            async with bound:
                async for watched in service.agent.watch(
                    thread_id=thread_id,
                    turn_id=turn_id,
                    after=after,
                    poll_interval=service.watch_poll,
                ):
                    queue.put_nowait(watched)
                    if isinstance(watched.item, TurnCompleted):
                        return
        except Exception as exc:
            if isinstance(exc, TimeoutError) and bound.expired():
                queue.put_nowait(_Failed(still_running()))
            else:
                queue.put_nowait(_Failed(await _problem(service, exc, thread_id, turn_id)))
        finally:
            queue.put_nowait(_END)

    task = service.turns.follow(produce())
    first: Any = None
    try:
        first = await asyncio.wait_for(queue.get(), FIRST_WAIT)
    except TimeoutError:
        pass
    except BaseException:
        task.cancel()
        raise
    if isinstance(first, _Failed):
        raise first.problem
    if first is _END:  # cancelled by the drain
        raise _shutting_down()

    encoder = _Encoder(replayed, collapse=collapse)

    async def frames() -> AsyncIterator[bytes]:
        item: Any = first
        try:
            if item is None:
                yield encode_comment("waiting for the turn")
            while True:
                if item is None:
                    left = KEEP_ALIVE if deadline is None else deadline - loop.time()
                    if left <= 0:
                        yield encode_event("error", still_running().document())
                        return
                    try:
                        item = await asyncio.wait_for(queue.get(), min(left, KEEP_ALIVE))
                    except TimeoutError:
                        yield encode_comment("keep-alive")
                        continue
                if item is _END or isinstance(item, _Failed):
                    problem = item.problem if isinstance(item, _Failed) else _shutting_down()
                    yield encode_event("error", problem.document())
                    return
                for frame in encoder.frames(item):
                    yield frame
                if isinstance(item.item, TurnCompleted):
                    return
                item = None
        finally:
            task.cancel()  # the client left or the stream ended: the turn goes on

    return StreamingResponse(
        frames(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
