"""Submitted turns run by workers, and watched from the store (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from intention_kernel.contracts import ErrorCode, KernelError, ModelRequest
from intention_kernel.contracts.errors import InvalidInputError, ModelGatewayError
from intention_kernel.contracts.inbox import RequestState
from intention_kernel.kernel import StepFinished, StepStarted, TextDelta, TurnCompleted

from .support import World, make_world, working

LOOKUP = [{"capability": "orders.lookup", "input": {"order_id": "42"}}]


async def settled(world: World, thread_id: str, turn_id: str) -> RequestState:
    inbox = world.durability.inbox  # type: ignore[attr-defined]
    async with asyncio.timeout(10):
        while True:
            request = await inbox.get(thread_id, turn_id)
            if request is not None and request.state in (RequestState.DONE, RequestState.DEAD):
                return RequestState(request.state)
            await asyncio.sleep(0.02)


async def test_a_submitted_turn_runs_once_and_its_request_is_done(world: World) -> None:
    world.say("where is 42", LOOKUP)
    request = await world.agent.submit(thread_id="t1", turn_id="u1", text="where is 42")
    assert request.state is RequestState.PENDING
    assert await world.durability.get_turn("t1", "u1") is None  # submit returns at once
    async with working(world):
        assert await settled(world, "t1", "u1") is RequestState.DONE
    stored = await world.durability.get_turn("t1", "u1")
    assert stored is not None and isinstance(stored.response, dict)
    assert "shipped" in str(stored.response["text"])
    assert world.shop.calls == {"orders.lookup": 1}
    again = await world.agent.run(thread_id="t1", turn_id="u1", text="where is 42")
    assert again.replayed and world.shop.calls == {"orders.lookup": 1}


async def test_submit_is_idempotent_and_refuses_another_request_under_the_same_id(
    world: World,
) -> None:
    first = await world.agent.submit(thread_id="t1", turn_id="u1", text="hello")
    second = await world.agent.submit(thread_id="t1", turn_id="u1", text="hello")
    assert second.position == first.position
    with pytest.raises(KernelError) as caught:
        await world.agent.submit(thread_id="t1", turn_id="u1", text="something else")
    assert caught.value.code is ErrorCode.TURN_ID_REUSED
    inbox = world.durability.inbox  # type: ignore[attr-defined]
    assert len(await inbox.list_requests()) == 1


async def test_a_direct_run_and_a_submit_of_one_id_are_one_turn(world: World) -> None:
    world.say("where is 42", LOOKUP)
    await world.run("u1", "where is 42")
    request = await world.agent.submit(thread_id="t1", turn_id="u1", text="where is 42")
    assert request.state is RequestState.DONE
    with pytest.raises(KernelError) as caught:
        await world.agent.submit(thread_id="t1", turn_id="u1", text="where is 43")
    assert caught.value.code is ErrorCode.TURN_ID_REUSED
    # Submitted first, then run directly: the direct run's commit marks the request done.
    await world.agent.submit(thread_id="t1", turn_id="u2", text="where is 42")
    await world.run("u2", "where is 42")
    inbox = world.durability.inbox  # type: ignore[attr-defined]
    assert (await inbox.get("t1", "u2")).state is RequestState.DONE
    assert world.shop.calls == {"orders.lookup": 2}


async def test_requests_of_a_thread_commit_in_submission_order(world: World) -> None:
    world.say("where is 42", LOOKUP)
    world.shop.delay = 0.01
    for n in range(6):
        for thread in ("a", "b"):
            await world.agent.submit(thread_id=thread, turn_id=f"u{n}", text="where is 42")
    async with working(world, concurrency=4):
        for thread in ("a", "b"):
            assert await settled(world, thread, "u5") is RequestState.DONE
    for thread in ("a", "b"):
        turns = await world.durability.list_turns(thread)
        assert [t.turn_id for t in turns] == [f"u{n}" for n in range(6)]


async def test_watch_yields_progress_then_the_committed_result_and_rejoins_by_cursor(
    world: World,
) -> None:
    world.say("where is 42", LOOKUP)
    await world.agent.submit(thread_id="t1", turn_id="u1", text="where is 42")
    seen = []
    async with working(world):
        async for watched in world.agent.watch(thread_id="t1", turn_id="u1"):
            seen.append(watched)
    items = [w.item for w in seen]
    assert isinstance(items[-1], TurnCompleted)
    result = items[-1].result
    assert any(isinstance(i, StepStarted) for i in items)
    assert any(isinstance(i, StepFinished) for i in items)
    shown = ""
    for item in items:
        if isinstance(item, TextDelta):
            shown = ("" if item.restarted else shown) + item.text
    assert shown == result.response.text
    # Rejoining after any item yields the rest, and the text adds up to the committed one.
    for k, stopped in enumerate(seen[:-1]):
        shown = ""
        for item in items[: k + 1]:
            if isinstance(item, TextDelta):
                shown = ("" if item.restarted else shown) + item.text
        rejoined = [
            w.item
            async for w in world.agent.watch(thread_id="t1", turn_id="u1", after=stopped.cursor)
        ]
        assert rejoined[-1] == items[-1]
        for item in rejoined:
            if isinstance(item, TextDelta):
                shown = ("" if item.restarted else shown) + item.text
        assert shown == result.response.text, k


async def test_watch_refuses_a_foreign_cursor_and_an_unknown_turn(world: World) -> None:
    await world.agent.submit(thread_id="t1", turn_id="u1", text="hello")
    await world.agent.submit(thread_id="t1", turn_id="u2", text="hello")
    async with working(world):
        watched = [w async for w in world.agent.watch(thread_id="t1", turn_id="u1")]
    with pytest.raises(InvalidInputError) as caught:
        async for _ in world.agent.watch(thread_id="t1", turn_id="u2", after=watched[0].cursor):
            pass
    assert caught.value.code is ErrorCode.INVALID_CURSOR
    with pytest.raises(KernelError) as unknown:
        async for _ in world.agent.watch(thread_id="t1", turn_id="nope"):
            pass
    assert unknown.value.code is ErrorCode.REQUEST_NOT_FOUND
    for interval in (0, -1, float("nan"), True, 61):
        with pytest.raises(InvalidInputError):
            async for _ in world.agent.watch(thread_id="t1", turn_id="u1", poll_interval=interval):
                pass


async def test_a_retryable_failure_is_retried_with_backoff(world: World) -> None:
    world.say("where is 42", LOOKUP)
    calls = []

    def flaky(request: ModelRequest) -> object:
        calls.append(1)
        if len(calls) == 1:
            return ModelGatewayError("provider overloaded")
        return {"intentions": LOOKUP, "answer": None, "reply": None}

    world.gateway.set("interpret", flaky)
    await world.agent.submit(thread_id="t1", turn_id="u1", text="where is 42")
    async with working(world):
        assert await settled(world, "t1", "u1") is RequestState.DONE
    inbox = world.durability.inbox  # type: ignore[attr-defined]
    request = await inbox.get("t1", "u1")
    assert request.attempts == 2 and request.error_code == "MODEL_GATEWAY_FAILED"


async def test_a_non_retryable_failure_is_dead_and_the_thread_goes_on(
    world: World,
) -> None:
    def broken(request: ModelRequest) -> object:
        if request.input["text"] == "bad":
            return ModelGatewayError("refused", retryable=False)
        return {"intentions": [], "answer": None, "reply": None}

    world.gateway.set("interpret", broken)
    await world.agent.submit(thread_id="t1", turn_id="u1", text="bad")
    await world.agent.submit(thread_id="t1", turn_id="u2", text="fine")
    async with working(world):
        assert await settled(world, "t1", "u1") is RequestState.DEAD
        assert await settled(world, "t1", "u2") is RequestState.DONE
        with pytest.raises(KernelError) as caught:
            async for _ in world.agent.watch(thread_id="t1", turn_id="u1"):
                pass
    assert caught.value.code is ErrorCode.REQUEST_DEAD
    assert caught.value.context["error_code"] == "MODEL_GATEWAY_FAILED"
    assert await world.durability.get_turn("t1", "u1") is None


async def test_a_request_not_before_a_time_waits_for_it(world: World) -> None:
    later = datetime.now().astimezone() + timedelta(seconds=0.6)
    await world.agent.submit(thread_id="t1", turn_id="u1", text="hello", not_before=later)
    async with working(world):
        await asyncio.sleep(0.2)
        assert await world.durability.get_turn("t1", "u1") is None
        assert await settled(world, "t1", "u1") is RequestState.DONE
    stored = await world.durability.get_turn("t1", "u1")
    assert stored is not None


async def test_draining_lets_a_running_turn_finish(world: World) -> None:
    world.say("where is 42", LOOKUP)
    world.shop.delay = 0.3
    await world.agent.submit(thread_id="t1", turn_id="u1", text="where is 42")
    worker = world.agent.worker(poll_interval=0.05, grace=5.0)
    task = asyncio.create_task(worker.run())
    async with asyncio.timeout(5):
        while world.shop.inside == 0:  # noqa: ASYNC110 - the host port counts, it has no event
            await asyncio.sleep(0.01)
    worker.stop()
    await asyncio.wait_for(task, 10)
    assert await world.durability.get_turn("t1", "u1") is not None


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("not_before", datetime(2030, 1, 1), ErrorCode.INVALID_INPUT),
        ("host_context", {"actor": "ann", "obj": object()}, ErrorCode.NOT_SERIALIZABLE),
        ("thread_id", "", ErrorCode.INVALID_THREAD_ID),
        ("text", "x" * 100_000, ErrorCode.INVALID_TEXT),
    ],
)
async def test_bad_requests_are_refused_and_nothing_is_written(
    world: World, field: str, value: object, code: ErrorCode
) -> None:
    arguments: dict[str, object] = {"thread_id": "t1", "turn_id": "u1", "text": "hi", field: value}
    with pytest.raises(InvalidInputError) as caught:
        await world.agent.submit(**arguments)  # type: ignore[arg-type]
    assert caught.value.code is code
    inbox = world.durability.inbox  # type: ignore[attr-defined]
    assert await inbox.list_requests() == []


def test_worker_settings_are_checked() -> None:
    from intention_kernel.contracts import ConfigurationError
    from intention_kernel.testing import MemoryDurability

    world = make_world(MemoryDurability())
    with pytest.raises(ConfigurationError):
        world.agent.worker(concurrency=0)
    with pytest.raises(ConfigurationError):
        world.agent.worker(claim_ttl=float("nan"))
