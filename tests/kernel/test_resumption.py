"""Pending work resumes: input requests, steps waiting for a fact, and answer sequences."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from intention_kernel.contracts import DurabilityStore, ErrorCode, InvalidInputError
from intention_kernel.kernel import (
    CapabilityContext,
    Completed,
    NeedsDependency,
    NeedsInput,
    define_capability,
)
from intention_kernel.testing import MemoryDurability

from .support import FaqAnswer, TrackQuery, make_world, support_agent
from .writes import accept, payments_world


class Store(BaseModel):
    store: str | None = None


async def _address(context: CapabilityContext, query: Store) -> Completed | NeedsInput:
    if query.store is None:
        return NeedsInput("Which store do you mean?", fields=("store",))
    return Completed(output=FaqAnswer(answer="Main St 1"), text=f"{query.store}: Main St 1.")


ADDRESS = define_capability(
    id="store.address",
    version="1.0.0",
    description="Give a store's address.",
    input=Store,
    output=FaqAnswer,
    execute=_address,
)


async def test_an_input_request_is_answered_when_the_step_is_planned_again(
    durability: DurabilityStore,
) -> None:
    world = make_world(durability, agent=support_agent([ADDRESS]))
    world.say("address?", [{"capability": "store.address", "input": {}}])
    world.say("the one in Delft", [{"capability": "store.address", "input": {"store": "Delft"}}])
    asked = await world.run("turn-1", "address?")
    assert asked.checkpoint.interaction is not None
    assert asked.checkpoint.interaction.kind == "input"
    answered = await world.run("turn-2", "the one in Delft")
    assert answered.response.text == "Delft: Main St 1."
    assert answered.checkpoint.agenda == [] and answered.checkpoint.interaction is None


async def _label(context: CapabilityContext, query: TrackQuery) -> Completed | NeedsDependency:
    order = context.fact("order@1")
    if order is None:
        return NeedsDependency("order@1", reason="I need to know which order first.")
    assert isinstance(order.value, dict)
    return Completed(output=FaqAnswer(answer="label"), text=f"Label for {order.value['order_id']}.")


LABEL = define_capability(
    id="shipping.label",
    version="1.0.0",
    description="Print a shipping label for the current order.",
    input=TrackQuery,
    output=FaqAnswer,
    execute=_label,
)


async def test_a_consumer_waiting_for_a_fact_resumes_after_its_provider(
    durability: DurabilityStore,
) -> None:
    world = make_world(durability, agent=support_agent([LABEL]))
    world.say("label please", [{"capability": "shipping.label", "input": {}}])
    world.say("order 42", [{"capability": "orders.lookup", "input": {"order_id": "42"}}])
    waiting = await world.run("turn-1", "label please")
    [item] = waiting.checkpoint.agenda
    assert item.status == "waiting_for_fact" and item.data["missing"] == ["order@1"]
    resumed = await world.run("turn-2", "order 42")
    assert [s.capability_id for s in resumed.response.steps] == ["orders.lookup", "shipping.label"]
    assert [s.status for s in resumed.response.steps] == ["completed", "completed"]
    assert "Label for 42." in resumed.response.text
    assert resumed.checkpoint.agenda == []
    assert "step.resumed" in world.collector.types("turn-2")


async def test_a_step_held_for_a_missing_fact_resumes_once_the_fact_exists(
    durability: DurabilityStore,
) -> None:
    world = make_world(durability)
    world.say("how is it shipped?", [{"capability": "shipping.track", "input": {}}])
    world.say("order 42", [{"capability": "orders.lookup", "input": {"order_id": "42"}}])
    held = await world.run("turn-1", "how is it shipped?")
    assert [a.status for a in held.checkpoint.agenda] == ["waiting_for_fact"]
    resumed = await world.run("turn-2", "order 42")
    assert "Order 42 travels with PostNL." in resumed.response.text
    assert resumed.checkpoint.agenda == []


# ------------------------------------------------------------------ answer sequences


ACTIONS = st.lists(
    st.sampled_from(["propose", "accept_ui", "accept_text", "decline", "unrelated", "stale_ui"]),
    max_size=8,
)


@settings(max_examples=40, deadline=None)
@given(ACTIONS)
def test_answer_sequences_match_a_simple_model(actions: list[str]) -> None:
    """Whatever the order of proposals, answers and unrelated questions: each accepted write
    runs exactly once, declined ones never, and the active interaction is the oldest pending."""
    asyncio.run(_sequence(actions))


async def _sequence(actions: list[str]) -> None:
    store = MemoryDurability()
    world, payments = payments_world(store)
    pending: list[str] = []
    executed: list[str] = []
    proposed_count = 0
    last: Any = None
    stale: dict[str, Any] | None = None
    for n, action in enumerate(actions):
        turn = f"turn-{n}"
        if action == "propose":
            proposed_count += 1
            order = f"o{proposed_count}"
            world.say(
                f"charge {order}",
                [{"capability": "payments.charge", "input": {"order_id": order, "amount": 1}}],
            )
            last = await world.run(turn, f"charge {order}")
            pending.append(order)
        elif action in ("accept_ui", "accept_text", "decline"):
            if not pending:
                continue
            if action == "accept_ui":
                stale = accept(last)
                last = await world.run(turn, "", selection=stale)
            else:
                last = await world.run(turn, "yes" if action == "accept_text" else "no")
            order = pending.pop(0)
            if action != "decline":
                executed.append(order)
        elif action == "unrelated":
            last = await world.run(turn, "where is order 42?")
        elif action == "stale_ui" and stale is not None:
            with pytest.raises(InvalidInputError) as info:
                await world.run(turn, "", selection=stale)
            assert info.value.code == ErrorCode.INTERACTION_NOT_ACTIVE
        if last is not None:
            waiting = [a.input["order_id"] for a in last.checkpoint.agenda]
            assert waiting == pending
            interaction = last.checkpoint.interaction
            if pending:
                assert interaction is not None
                assert interaction.agenda_item_id == last.checkpoint.agenda[0].id
            else:
                assert interaction is None
    assert payments.calls == [f"payments.charge:order:{o}" for o in executed]
    await store.close()


async def test_a_waiting_step_is_not_rerun_until_something_changes(
    durability: DurabilityStore,
) -> None:
    runs: list[str] = []

    async def picky(context: CapabilityContext, query: TrackQuery) -> NeedsDependency:
        runs.append(context.turn.turn_id)
        return NeedsDependency("order@1", reason="not that order")

    cap = define_capability(
        id="shipping.picky",
        version="1.0.0",
        description="Never satisfied.",
        input=TrackQuery,
        output=FaqAnswer,
        requires=["order@1"],
        execute=picky,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("order 42", [{"capability": "orders.lookup", "input": {"order_id": "42"}}])
    world.say("picky", [{"capability": "shipping.picky", "input": {}}])
    world.say("returns?", [{"capability": "faq.search", "input": {"topic": "returns"}}])
    await world.run("turn-1", "order 42")
    await world.run("turn-2", "picky")
    await world.run("turn-3", "returns?")
    assert runs == ["turn-2"]
    await world.run("turn-4", "order 42")  # the fact is replaced: worth another try
    assert runs == ["turn-2", "turn-4"]
