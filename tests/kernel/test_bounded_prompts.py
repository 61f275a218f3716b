"""Bounded prompts: past ``KernelLimits.select_above`` capabilities, a ``select`` request on
summaries picks the few whose schemas ``interpret`` gets, so prompt size stays flat."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, JsonValue, create_model

from intention_kernel.contracts import DurabilityStore, ModelRequest, ModelResponse
from intention_kernel.kernel import Completed, KernelLimits, define_capability
from intention_kernel.kernel._pipeline.plan import REFUSED

from .support import FaqAnswer, World, make_world, support_agent
from .writes import CHARGE, CHARGE_42, Payments, accept


async def _done(context: Any, query: Any) -> Completed:
    return Completed(output={"answer": "ok"}, text="Done.")


def catalog(n: int) -> list[Any]:
    """``n`` capabilities, each with its own input schema."""
    caps = []
    for i in range(n):
        fields: dict[str, Any] = {
            f"field_{i}_{j}": (str, Field(description=f"part {j} of request {i}")) for j in range(3)
        }
        model: type[BaseModel] = create_model(f"Input{i}", **fields)
        caps.append(
            define_capability(
                id=f"extra.cap{i}",
                version="1.0.0",
                description=f"Do extra thing number {i}.",
                input=model,
                output=FaqAnswer,
                execute=_done,
            )
        )
    return caps


def shown(request: ModelRequest) -> list[str]:
    caps = request.input["capabilities"]
    assert isinstance(caps, list)
    return [str(c["id"]) for c in caps if isinstance(c, dict)]


def big_world(durability: DurabilityStore, n: int, select: Any, **kw: Any) -> World:
    world = make_world(
        durability,
        agent=support_agent(catalog(n), **kw),
        script={"select": select},
        limits=KernelLimits(select_above=20, select_at_most=3),
    )
    world.say("where is order 42?", [{"capability": "orders.lookup", "input": {"order_id": "42"}}])
    return world


async def test_interpret_gets_only_the_chosen_capabilities(durability: DurabilityStore) -> None:
    chosen: JsonValue = {"capabilities": ["orders.lookup", "nope", "extra.cap7"]}
    world = big_world(durability, 40, chosen)
    result = await world.run("turn-1", "where is order 42?")
    assert result.response.text == "Order 42 has shipped."
    assert [c.task for c in world.gateway.calls] == ["select", "interpret", "compose"]
    select, interpret = world.gateway.calls[0], world.gateway.calls[1]
    summaries = select.input["capabilities"]
    assert isinstance(summaries, dict) and len(summaries) == 44
    assert summaries["orders.lookup"] == "Look up an order by id."
    assert "input_schema" not in select.model_dump_json()
    assert shown(interpret) == ["orders.lookup", "extra.cap7"]
    schema: Any = interpret.output_schema
    branches = schema["properties"]["intentions"]["items"]["anyOf"]
    assert [b["properties"]["capability"]["const"] for b in branches] == shown(interpret)
    [selected] = world.collector.of_type("capabilities.selected")
    assert selected.data == {"valid": True, "chosen": ["orders.lookup", "extra.cap7"], "of": 44}


async def test_no_selection_below_the_limit(durability: DurabilityStore) -> None:
    world = big_world(durability, 10, {"capabilities": []})
    await world.run("turn-1", "where is order 42?")
    assert [c.task for c in world.gateway.calls] == ["interpret", "compose"]
    assert len(shown(world.gateway.calls[0])) == 14


async def test_an_unusable_selection_shows_the_whole_catalog(durability: DurabilityStore) -> None:
    world = big_world(durability, 40, {"capabilities": "orders.lookup"})
    result = await world.run("turn-1", "where is order 42?")
    assert result.response.text == "Order 42 has shipped."
    assert len(shown(world.gateway.calls[1])) == 44


async def test_a_chosen_capability_count_is_bounded(durability: DurabilityStore) -> None:
    many: JsonValue = {"capabilities": [f"extra.cap{i}" for i in range(10)]}
    world = big_world(durability, 40, many)
    await world.run("turn-1", "where is order 42?")
    assert shown(world.gateway.calls[1]) == ["extra.cap0", "extra.cap1", "extra.cap2"]


async def test_pending_work_keeps_its_capability_in_view(durability: DurabilityStore) -> None:
    payments = Payments()
    world = make_world(
        durability,
        agent=support_agent([CHARGE, *catalog(30)]),
        script={"select": {"capabilities": ["payments.charge"]}},
        limits=KernelLimits(select_above=20, select_at_most=3),
        ports={"payments": payments},
    )
    world.say("charge 42", CHARGE_42)
    held = await world.run("turn-1", "charge 42")
    assert held.checkpoint.interaction is not None
    world.gateway.set("select", {"capabilities": []})  # the next message names nothing
    await world.run("turn-2", "what was that again?")
    last = [c for c in world.gateway.calls if c.task == "interpret"][-1]
    assert shown(last) == ["payments.charge"]  # pinned by the agenda, though not chosen
    await world.run("turn-3", "", selection=accept(held))
    assert payments.calls


async def test_the_interpret_prompt_does_not_grow_with_the_catalog(
    durability: DurabilityStore,
) -> None:
    sizes = []
    for n in (30, 200):
        world = big_world(durability, n, {"capabilities": ["orders.lookup"]})
        await world.run(f"turn-{n}", "where is order 42?", thread_id=f"t{n}")
        invoked = world.collector.of_type("model.invoked")
        [interpret] = [e for e in invoked if e.data["task"] == "interpret"]
        sizes.append(interpret.data["prompt_bytes"])
    assert sizes[0] == sizes[1]


async def test_a_refused_selection_is_answered_safely(durability: DurabilityStore) -> None:
    refused = ModelResponse(finish_reason="content_filter")
    world = big_world(durability, 40, refused)
    result = await world.run("turn-1", "where is order 42?")
    assert [c.task for c in world.gateway.calls] == ["select"]
    assert result.response.text == REFUSED
    assert world.shop.total() == 0
