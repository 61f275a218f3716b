"""``POST .../turns`` with a turn inbox: submit the turn, then follow it (or answer 202).

Why submit: the turn then runs in a worker (this instance's or another's) to its commit,
whatever happens to the request: a client that disconnects, a proxy that cut a stream, a
timeout. The request only follows it. ``Idempotent-Replayed`` says whether this delivery
submitted the turn (``false``) or found it submitted or committed already (``true``): the
stored request keeps the ``request_id`` of the delivery that stored it (in its host context),
so of two deliveries at once on two instances exactly one is the first.

Why a busy-thread policy: a thread's turns run one at a time in arrival order. ``enqueue``
queues a turn behind the thread's earlier ones; ``reject`` refuses it at once (409
``THREAD_BUSY``) while the thread has a pending or running request or a turn in progress, for a
front end that would rather say "wait" than queue what the user typed twice.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..contracts.errors import ErrorCode, KernelError
from ..contracts.inbox import InboxRequest, RequestState
from ..kernel import TurnResult
from ._follow import follow_result, follow_stream
from ._problems import HttpProblem
from ._service import Service
from ._turns import request_body, turn_body

__all__ = [
    "answer",
    "prefers_async",
    "refuse_if_busy",
    "stored_before",
    "submit_turn",
    "turn_location",
]


def answer(result: TurnResult, replayed: bool) -> JSONResponse:
    return JSONResponse(
        turn_body(result, replayed),
        headers={"Idempotent-Replayed": "true" if replayed else "false"},
    )


def prefers_async(request: Request) -> bool:
    """Whether the request says ``Prefer: respond-async`` (RFC 7240)."""
    for value in request.headers.getlist("prefer"):
        for preference in value.split(","):
            name = preference.split(";", 1)[0].split("=", 1)[0].strip().lower()
            if name == "respond-async":
                return True
    return False


def stored_before(submitted: InboxRequest, request_id: str) -> bool:
    """Whether the request was done or stored by an earlier delivery than the one whose
    host context says ``request_id`` (``Idempotent-Replayed``)."""
    stored_by = (submitted.host_context or {}).get("request_id")
    return submitted.state is RequestState.DONE or stored_by != request_id


def turn_location(thread_id: str, turn_id: str) -> str:
    return f"/v1/threads/{quote(thread_id, safe='')}/turns/{quote(turn_id, safe='')}"


def _busy() -> HttpProblem:
    return HttpProblem(
        409,
        str(ErrorCode.THREAD_BUSY),
        "this thread has a turn in progress or waiting; send this turn again once it finished",
        retryable=True,
    )


async def refuse_if_busy(service: Service, thread_id: str, turn_id: str) -> None:
    """``THREAD_BUSY`` when another turn of the thread is pending, running, or holds its
    lease (a direct run, on any instance); a turn already committed is never busy."""
    if service.turns.thread_busy(thread_id, turn_id):
        raise _busy()
    if await service.store.get_turn(thread_id, turn_id) is not None:
        return  # a delivery of a committed turn replays it
    if service.inbox is not None:
        for state in (RequestState.RUNNING, RequestState.PENDING):
            found = await service.inbox.list_requests(state=state, thread_id=thread_id, limit=2)
            if any(request.turn_id != turn_id for request in found):
                raise _busy()
    probe = getattr(service.store, "lease_info", None)
    if callable(probe):
        try:
            lease = await probe(thread_id)
        except KernelError:
            return  # a store without the probe: the inbox said enough
        if getattr(lease, "held", False):
            raise _busy()


async def submit_turn(
    service: Service, request: Request, arguments: dict[str, Any], stream: bool
) -> Response:
    """Submit the turn (idempotent on its ids), then follow it, stream it, or answer 202."""
    inbox = service.inbox
    assert inbox is not None
    thread_id: str = arguments["thread_id"]
    turn_id: str = arguments["turn_id"]
    context: dict[str, Any] = arguments["host_context"]
    with service.turns.delivering((thread_id, turn_id)):
        if service.busy == "reject" and await inbox.get(thread_id, turn_id) is None:
            await refuse_if_busy(service, thread_id, turn_id)
        submitted = await service.agent.submit(
            thread_id=thread_id,
            turn_id=turn_id,
            text=arguments["text"],
            selection=arguments["selection"],
            host_context=context,
        )
    done = submitted.state is RequestState.DONE  # a stored request is pending at first
    replayed = stored_before(submitted, context["request_id"])
    if prefers_async(request):
        stored = await service.store.get_turn(thread_id, turn_id) if done else None
        return JSONResponse(
            request_body(thread_id, turn_id, submitted, stored),
            status_code=202,
            headers={
                "Location": turn_location(thread_id, turn_id),
                "Preference-Applied": "respond-async",
                "Idempotent-Replayed": "true" if replayed else "false",
            },
        )
    if stream:
        after = request.headers.get("last-event-id")
        return await follow_stream(
            service,
            thread_id,
            turn_id,
            after=after,
            replayed=replayed,
            collapse=after is None and done,
        )
    return answer(await follow_result(service, thread_id, turn_id), replayed)
