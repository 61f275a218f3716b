"""``GET .../turns/{turn_id}`` (where a turn stands) and ``GET .../turns/{turn_id}/events`` (its
progress and result as server-sent events, rejoined with ``Last-Event-ID``).

Why any instance answers both: the request, the progress and the result are in the store, so
a client that lost its connection (or posted with ``Prefer: respond-async``) asks whichever
instance the load balancer picks. Both need ``read`` on the thread, as the other reads do.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..contracts.errors import ErrorCode
from ..contracts.ids import validate_turn_id
from ..contracts.inbox import RequestState
from ._follow import follow_stream
from ._problems import HttpProblem
from ._service import Service, _shutting_down
from ._turns import request_body

__all__ = ["get_turn", "turn_events"]


def _not_found() -> HttpProblem:
    detail = "no such turn: it was neither submitted nor committed"
    return HttpProblem(404, str(ErrorCode.REQUEST_NOT_FOUND), detail)


async def get_turn(service: Service, request: Request) -> Response:
    """The turn's state (``pending``, ``running``, ``done``, ``dead``), attempts, last failure
    and, once committed, its result as ``POST .../turns`` answers it."""
    _, thread_id = await service.thread(request, "read")
    turn_id = validate_turn_id(request.path_params["turn_id"])
    found = None if service.inbox is None else await service.inbox.get(thread_id, turn_id)
    # Done iff committed: the result is read only for a done request (or a turn without one).
    settled = found is None or found.state is RequestState.DONE
    stored = await service.store.get_turn(thread_id, turn_id) if settled else None
    if found is None and stored is None and not service.turns.in_flight((thread_id, turn_id)):
        raise _not_found()
    return JSONResponse(request_body(thread_id, turn_id, found, stored))


async def turn_events(service: Service, request: Request) -> Response:
    """The turn's recorded progress after the cursor ``Last-Event-ID`` (or ``?after=``), then
    its result (``turn.completed``) or, for a dead request, an ``error`` event."""
    _, thread_id = await service.thread(request, "read")
    turn_id = validate_turn_id(request.path_params["turn_id"])
    if service.turns.draining:
        raise _shutting_down()
    after = request.headers.get("last-event-id") or request.query_params.get("after") or None
    return await follow_stream(service, thread_id, turn_id, after=after, replayed=True)
