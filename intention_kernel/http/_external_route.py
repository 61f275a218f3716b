"""``POST /v1/threads/{thread_id}/external/{key}``: the outside world completes a parked step.

Why two ways in: the service's own callers complete a step as they start a turn (their bearer
token, ``turn`` on the thread); a third party (a payment provider's webhook, a reviewer's tool)
has no account here and sends the completion token the capability handed it
(``context.completion_token``), as ``Authorization: Bearer ikc1...`` or ``?token=`` for a
callback that can only be a URL. A token completes that key of that thread and nothing else, so
the answer tells its bearer only where the completion stands, never the thread's contents.
"""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..contracts.errors import ErrorCode
from ..contracts.ids import validate_thread_id
from ..kernel import CompletionTokens
from ._problems import HttpProblem
from ._service import Service, _shutting_down
from ._submitted import stored_before, turn_location

__all__ = ["complete_external", "completion_token"]

TOKEN_ACTOR = "completion-token"
"""The actor a token's completion is recorded with (the token names no principal)."""


def completion_token(request: Request) -> str | None:
    """The completion token the request carries, if it carries one."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip().startswith(CompletionTokens.PREFIX):
        return value.strip()
    return request.query_params.get("token")


async def complete_external(service: Service, request: Request) -> Response:
    """Submit the completion (``agent.complete_external``); 202 once it is durable."""
    token = completion_token(request)
    if token is None:
        principal, thread_id = await service.thread(request, "turn")
        actor = principal.id
    else:  # the kernel checks the token against the thread and the key before anything else
        thread_id = validate_thread_id(request.path_params["thread_id"])
        actor = TOKEN_ACTOR
    key = request.path_params["key"]
    body = await service.body(request, members=("result",))
    if "result" not in body:
        raise HttpProblem(
            422, str(ErrorCode.INVALID_INPUT), 'the body is {"result": <the outcome as JSON>}'
        )
    if service.turns.draining:
        raise _shutting_down()
    request_id = uuid.uuid4().hex
    submitted = await service.agent.complete_external(
        thread_id=thread_id,
        key=key,
        result=body["result"],
        token=token,
        host_context={"actor": actor, "request_id": request_id},
    )
    return JSONResponse(
        {
            "thread_id": thread_id,
            "key": key,
            "turn_id": submitted.turn_id,
            "state": str(submitted.state),
        },
        status_code=202,
        headers={
            "Location": turn_location(thread_id, submitted.turn_id),
            "Idempotent-Replayed": "true" if stored_before(submitted, request_id) else "false",
        },
    )
