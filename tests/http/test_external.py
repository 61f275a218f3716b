"""``POST /v1/threads/{thread_id}/external/{key}`` on a real server: a caller with ``turn`` on
the thread, or the bearer of the step's completion token, submits the completion (202, the same
completion again replays); everything else is a problem document with nothing written: no
credentials, a principal refused the thread, a bad token, an unknown key, a step past its
timeout, a body that is not ``{"result": ...}`` or too large."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from intention_kernel.contracts import DurabilityStore
from intention_kernel.http import BearerTokens, Principal, create_app
from tests.kernel.support import Clock, World
from tests.kernel.test_completion_tokens import T0, _world

from .support import TOKENS, Live, bearer, is_problem, serve


def _alice_only(principal: Principal, thread_id: str, action: str) -> bool:
    return principal.id == "alice"


@pytest.fixture
async def parked(store: DurabilityStore) -> AsyncIterator[tuple[Live, World, str]]:
    """A served agent whose step waits for ``review-d1`` on ``t1``; the token handed out."""
    world, handed = _world(store)
    await world.run("turn-1", "review d1")
    app = create_app(
        world.agent,
        authenticate=BearerTokens.from_secrets(TOKENS),
        authorize=_alice_only,
        workers=0,  # completions stay pending: the answers are about submitting them
        max_body_bytes=4096,
    )
    async with serve(app) as live:
        yield live, world, handed[0]


async def _complete(live: Live, body: Any, *, key: str = "review-d1", **options: Any) -> Any:
    return await live.client.post(f"/v1/threads/t1/external/{key}", json=body, **options)


async def _pending(store: DurabilityStore) -> list[str]:
    inbox: Any = getattr(store, "inbox")  # noqa: B009 - the store's inbox
    return [r.turn_id for r in await inbox.list_requests(thread_id="t1")]


async def test_a_caller_with_turn_on_the_thread_completes_it(
    parked: tuple[Live, World, str], store: DurabilityStore
) -> None:
    live, _, _ = parked
    first = await _complete(live, {"result": {"approved": True}}, headers=bearer("alice"))
    assert first.status_code == 202, first.text
    assert first.headers["Location"] == "/v1/threads/t1/turns/review-d1%40completed"
    assert first.headers["Idempotent-Replayed"] == "false"
    assert first.json() == {
        "thread_id": "t1",
        "key": "review-d1",
        "turn_id": "review-d1@completed",
        "state": "pending",
    }
    again = await _complete(live, {"result": {"approved": True}}, headers=bearer("alice"))
    assert again.status_code == 202 and again.headers["Idempotent-Replayed"] == "true"
    other = await _complete(live, {"result": {"approved": False}}, headers=bearer("alice"))
    is_problem(other, 409, "TURN_ID_REUSED")
    assert await _pending(store) == ["review-d1@completed"]


async def test_the_token_needs_no_account(
    parked: tuple[Live, World, str], store: DurabilityStore
) -> None:
    live, _, token = parked
    header = await _complete(
        live, {"result": {"approved": True}}, headers={"Authorization": f"Bearer {token}"}
    )
    assert header.status_code == 202, header.text
    query = await _complete(live, {"result": {"approved": True}}, params={"token": token})
    assert query.status_code == 202 and query.headers["Idempotent-Replayed"] == "true"
    assert await _pending(store) == ["review-d1@completed"]


@pytest.mark.parametrize(
    ("options", "status", "code"),
    [
        ({}, 401, "UNAUTHENTICATED"),
        ({"headers": {"Authorization": "Bearer wrong-token-123"}}, 401, "UNAUTHENTICATED"),
        ({"headers": bearer("bob")}, 403, "FORBIDDEN"),
        ({"params": {"token": "ikc1.forged"}}, 403, "EXTERNAL_TOKEN_INVALID"),
        ({"headers": {"Authorization": "Bearer ikc1.forged"}}, 403, "EXTERNAL_TOKEN_INVALID"),
    ],
)
async def test_without_the_right_to_complete_nothing_is_written(
    parked: tuple[Live, World, str],
    store: DurabilityStore,
    options: dict[str, Any],
    status: int,
    code: str,
) -> None:
    live, _, _ = parked
    refused = await _complete(live, {"result": {"approved": True}}, **options)
    is_problem(refused, status, code)
    assert await _pending(store) == []


async def test_a_token_of_another_thread_is_refused(
    parked: tuple[Live, World, str], store: DurabilityStore
) -> None:
    live, _, token = parked
    refused = await live.client.post(
        "/v1/threads/t2/external/review-d1", json={"result": 1}, params={"token": token}
    )
    is_problem(refused, 403, "EXTERNAL_TOKEN_INVALID")
    assert await _pending(store) == []


@pytest.mark.parametrize(
    ("body", "key", "status", "code"),
    [
        ({"result": 1}, "review-d9", 404, "EXTERNAL_UNKNOWN"),
        ({"result": 1}, "x" * 300, 400, "INVALID_ID"),
        ({}, "review-d1", 422, "INVALID_INPUT"),
        ({"result": 1, "text": "hi"}, "review-d1", 422, "INVALID_INPUT"),
        ([1], "review-d1", 422, "INVALID_INPUT"),
        ({"result": "x" * 5000}, "review-d1", 413, "PAYLOAD_TOO_LARGE"),
    ],
)
async def test_a_bad_completion_is_a_problem_with_nothing_written(
    parked: tuple[Live, World, str],
    store: DurabilityStore,
    body: Any,
    key: str,
    status: int,
    code: str,
) -> None:
    live, _, _ = parked
    refused = await _complete(live, body, key=key, headers=bearer("alice"))
    is_problem(refused, status, code)
    assert await _pending(store) == []


async def test_a_body_that_is_not_json_is_refused(parked: tuple[Live, World, str]) -> None:
    live, _, token = parked
    refused = await live.client.post(
        "/v1/threads/t1/external/review-d1", content=b"{nope", params={"token": token}
    )
    is_problem(refused, 400, "INVALID_JSON")


async def test_a_completion_after_the_timeout_is_gone(
    parked: tuple[Live, World, str], store: DurabilityStore
) -> None:
    live, world, token = parked
    clock = world.kernel.clock
    assert isinstance(clock, Clock)
    clock.now = T0 + timedelta(hours=1)
    late = await _complete(live, {"result": {"approved": True}}, params={"token": token})
    is_problem(late, 410, "EXTERNAL_EXPIRED")
    assert await _pending(store) == []
