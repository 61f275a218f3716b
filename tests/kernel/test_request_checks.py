"""Everything a turn will commit is checked before anything runs: no provider call for a turn
that cannot commit, and a model's unstorable proposal is repaired or refused, never raised."""

from __future__ import annotations

from typing import Any

import pytest

from intention_kernel.contracts import DurabilityStore, InvalidInputError
from intention_kernel.kernel import KernelLimits

from .support import World, make_world
from .writes import CHARGE, REFUND, accept, payments_world

HUGE = 10**5000


def _repair_with(world: World, intentions: list[dict[str, Any]]) -> None:
    world.gateway.set(
        "repair", {"intentions": list[Any](intentions), "answer": None, "reply": None}
    )


def _repair_problems(world: World) -> list[Any]:
    """What the kernel told the model was wrong, per refused intention."""
    [repair] = [c for c in world.gateway.calls if c.task == "repair"]
    problems = repair.input["problems"]
    assert isinstance(problems, list)
    return problems


@pytest.mark.parametrize(
    "actor",
    ["ann\x00", "bad\ud800", "x" * 10_000],
    ids=["nul", "lone-surrogate", "too-long"],
)
async def test_an_unstorable_actor_is_refused_before_the_write_runs(
    durability: DurabilityStore, actor: str
) -> None:
    world, payments = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")
    calls = world.gateway.count()
    with pytest.raises(InvalidInputError) as info:
        await world.run("turn-2", "", selection=accept(proposed), host_context={"actor": actor})
    assert info.value.context["field"] == "host_context.actor"
    assert payments.calls == [] and world.gateway.count() == calls
    stored = await durability.load_checkpoint("t1")
    assert stored is not None and stored.revision == 1
    # The same answer with a storable actor goes through.
    done = await world.run("turn-2", "", selection=accept(proposed), host_context={"actor": "ann"})
    assert payments.calls == ["payments.charge:order:42"]
    assert done.checkpoint.revision == 2


async def test_other_host_context_values_are_the_hosts_own(world: World) -> None:
    """Only what the kernel records (the actor, when it is text) must be storable."""
    world.say("where is order 42?", [{"capability": "orders.lookup", "input": {"order_id": "42"}}])
    context = {"actor": 7, "session": object(), "tenant": "acme"}
    result = await world.run("turn-1", "where is order 42?", host_context=context)
    assert result.response.text == "Order 42 has shipped."


@pytest.mark.parametrize(
    "value",
    ["4\x002", "bad\udc00"],
    ids=["nul", "lone-surrogate"],
)
async def test_a_proposed_input_that_cannot_be_stored_never_reaches_the_provider(
    world: World, value: str
) -> None:
    bad: list[dict[str, Any]] = [{"capability": "orders.lookup", "input": {"order_id": value}}]
    world.say("look it up", bad)
    _repair_with(world, bad)
    result = await world.run("turn-1", "look it up")
    assert world.shop.total() == 0
    assert result.response.kind == "clarification"
    assert "order_id" in result.response.text
    assert world.gateway.count("repair") == 1
    [problem] = _repair_problems(world)
    assert problem["capability"] == "orders.lookup"
    assert problem["problems"][0]["loc"] == ["order_id"]


async def test_a_huge_integer_in_a_proposed_write_is_repaired_not_raised(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    world.say(
        "charge a lot",
        [{"capability": "payments.charge", "input": {"order_id": "42", "amount": HUGE}}],
    )
    _repair_with(
        world, [{"capability": "payments.charge", "input": {"order_id": "42", "amount": 5}}]
    )
    proposed = await world.run("turn-1", "charge a lot")
    [problem] = _repair_problems(world)
    assert problem["capability"] == "payments.charge"
    assert problem["problems"][0]["loc"] == ["amount"]
    [item] = proposed.checkpoint.agenda
    assert item.input == {"order_id": "42", "amount": 5}
    await world.run("turn-2", "", selection=accept(proposed))
    assert payments.calls == ["payments.charge:order:42"]


async def test_a_huge_integer_the_repair_keeps_becomes_a_clarification(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    huge: list[dict[str, Any]] = [
        {"capability": "payments.charge", "input": {"order_id": "42", "amount": HUGE}}
    ]
    world.say("charge a lot", huge)
    _repair_with(world, huge)
    result = await world.run("turn-1", "charge a lot")
    assert result.response.kind == "clarification"
    assert result.checkpoint.agenda == [] and result.checkpoint.interaction is None
    assert payments.calls == []


async def test_a_huge_integer_in_a_read_input_is_not_run(durability: DurabilityStore) -> None:
    from pydantic import BaseModel

    from intention_kernel.kernel import Completed, define_capability

    from .support import FaqAnswer, support_agent

    class Count(BaseModel):
        n: int

    calls: list[int] = []

    async def count(context: Any, query: Count) -> Completed:
        calls.append(1)
        return Completed(output=FaqAnswer(answer="ok"), text="ok")

    cap = define_capability(
        id="numbers.count",
        version="1.0.0",
        description="Count to a number.",
        input=Count,
        output=FaqAnswer,
        execute=count,
    )
    world = make_world(
        durability, agent=support_agent([cap, CHARGE, REFUND]), limits=KernelLimits()
    )
    bad: list[dict[str, Any]] = [{"capability": "numbers.count", "input": {"n": HUGE}}]
    world.say("count", bad)
    _repair_with(world, bad)
    result = await world.run("turn-1", "count")
    assert calls == [] and result.response.kind == "clarification"
    assert result.checkpoint.revision == 1


async def test_an_unstorable_composed_answer_falls_back_to_the_kernels_words(
    world: World,
) -> None:
    world.say("where is order 42?", [{"capability": "orders.lookup", "input": {"order_id": "42"}}])
    world.gateway.set("compose", {"text": "Shipped\x00!", "citations": []})
    result = await world.run("turn-1", "where is order 42?")
    assert result.response.kind == "fallback"
    assert result.response.text == "Order 42 has shipped."
    assert world.gateway.count("compose") == 2


@pytest.mark.parametrize("value", [float("inf"), float("nan")], ids=["infinity", "nan"])
async def test_a_non_finite_number_is_refused_not_stored_as_null(
    durability: DurabilityStore, value: float
) -> None:
    """JSON output would write it as ``null``: what is stored (and confirmed) must be what runs."""
    from pydantic import BaseModel

    from intention_kernel.kernel import Completed, define_capability

    from .support import FaqAnswer, support_agent

    class Price(BaseModel):
        price: float

    calls: list[float] = []

    async def quote(context: Any, query: Price) -> Completed:
        calls.append(query.price)
        return Completed(output=FaqAnswer(answer="ok"), text="Quoted.")

    cap = define_capability(
        id="prices.quote",
        version="1.0.0",
        description="Quote a price.",
        input=Price,
        output=FaqAnswer,
        execute=quote,
    )
    world = make_world(durability, agent=support_agent([cap]))
    bad: list[dict[str, Any]] = [{"capability": "prices.quote", "input": {"price": value}}]
    world.say("quote", bad)
    _repair_with(world, bad)
    result = await world.run("turn-1", "quote")
    assert calls == [] and result.response.kind == "clarification"
    [problem] = _repair_problems(world)
    assert problem["problems"][0]["loc"] == ["price"]
