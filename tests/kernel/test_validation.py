"""Every public entry point refuses bad input with a typed error and writes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intention_kernel.contracts import (
    ConfigurationError,
    ErrorCode,
    InvalidIdError,
    InvalidInputError,
    KernelError,
)
from intention_kernel.kernel import Kernel, KernelLimits
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

from .support import World, make_world


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"thread_id": ""}, ErrorCode.INVALID_THREAD_ID),
        ({"thread_id": "a\x00b"}, ErrorCode.INVALID_THREAD_ID),
        ({"thread_id": 7}, ErrorCode.INVALID_THREAD_ID),
        ({"turn_id": " "}, ErrorCode.INVALID_TURN_ID),
        ({"turn_id": "x" * 257}, ErrorCode.INVALID_TURN_ID),
        ({"text": None}, ErrorCode.INVALID_TEXT),
        ({"text": "   "}, ErrorCode.INVALID_TEXT),
        ({"text": "x" * 20_000}, ErrorCode.INVALID_TEXT),
        ({"text": "bad\ud800"}, ErrorCode.INVALID_TEXT),
        ({"selection": ["yes"]}, ErrorCode.INVALID_SELECTION),
        ({"selection": {"option": float("nan")}}, ErrorCode.INVALID_SELECTION),
        ({"selection": {1: "yes"}}, ErrorCode.INVALID_SELECTION),
        ({"selection": {"blob": "x" * 20_000}}, ErrorCode.INVALID_SELECTION),
        ({"host_context": ["x"]}, ErrorCode.INVALID_INPUT),
        ({"timeout": 0}, ErrorCode.INVALID_INPUT),
        ({"timeout": float("inf")}, ErrorCode.INVALID_INPUT),
        ({"timeout": True}, ErrorCode.INVALID_INPUT),
    ],
)
async def test_bad_run_arguments_are_refused_before_anything_runs(
    world: World, kwargs: dict[str, Any], code: ErrorCode
) -> None:
    call: dict[str, Any] = {"thread_id": "t1", "turn_id": "turn-1", "text": "hello", **kwargs}
    with pytest.raises(InvalidInputError) as info:
        await world.agent.run(**call)
    assert info.value.code == code
    assert world.gateway.count() == 0
    assert await world.durability.load_checkpoint("t1") is None


async def test_blank_text_is_fine_with_a_selection(world: World) -> None:
    result = await world.run("turn-1", "", selection={"choice": "red"})
    assert result.checkpoint.revision == 1


def test_kernel_configuration_is_checked() -> None:
    with pytest.raises(ConfigurationError) as info:
        Kernel(durability=object(), model=object(), ports=[], redact=3)  # type: ignore[arg-type]
    assert len(info.value.context["problems"]) == 4
    with pytest.raises(ConfigurationError):
        KernelLimits(max_messages=0)
    with pytest.raises(ConfigurationError):
        KernelLimits(step_timeout=-1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    thread_id=st.one_of(st.text(max_size=300), st.integers(), st.none()),
    text=st.one_of(st.text(max_size=50), st.none(), st.binary(max_size=5)),
    selection=st.one_of(
        st.none(),
        st.dictionaries(st.text(max_size=5), st.one_of(st.floats(), st.text(max_size=5))),
        st.lists(st.integers(), max_size=2),
    ),
)
def test_any_input_either_commits_a_turn_or_is_refused_cleanly(
    thread_id: Any, text: Any, selection: Any
) -> None:
    async def scenario() -> None:
        durability = MemoryDurability()
        world = make_world(durability)
        refused: KernelError | None = None
        try:
            result = await world.agent.run(
                thread_id=thread_id, turn_id="turn-1", text=text, selection=selection
            )
        except (InvalidInputError, InvalidIdError) as exc:
            refused = exc
        if refused is not None:
            assert refused.code.startswith("INVALID_")
            assert world.gateway.count() == 0
            assert not durability.store.turns
        else:
            assert result.checkpoint.revision == 1
            assert await durability.load_checkpoint(thread_id) == result.checkpoint

    asyncio.run(scenario())


async def test_scripted_gateway_without_an_answer_fails_cleanly(world: World) -> None:
    gateway = ScriptedModelGateway({})
    agent = Kernel(durability=world.durability, model=gateway).compile(world.agent_definition())
    with pytest.raises(KernelError) as info:
        await agent.run(thread_id="t9", turn_id="turn-1", text="hi")
    assert info.value.code == ErrorCode.MODEL_GATEWAY_FAILED
    assert await world.durability.load_checkpoint("t9") is None


async def test_gateway_returning_garbage_is_a_typed_failure(world: World) -> None:
    class Garbage:
        async def complete(self, request: object) -> object:
            return {"not": "a response"}

    agent = Kernel(durability=world.durability, model=Garbage()).compile(  # type: ignore[arg-type]
        world.agent_definition()
    )
    with pytest.raises(KernelError) as info:
        await agent.run(thread_id="t9", turn_id="turn-1", text="hi")
    assert info.value.code == ErrorCode.MODEL_OUTPUT_INVALID
