"""A step held for consent resolves its required facts first: consent covers what it relies on."""

from __future__ import annotations

from typing import Any

from intention_kernel.contracts import DurabilityStore, KernelCheckpoint
from intention_kernel.kernel import (
    CapabilityContext,
    Failed,
    Kernel,
    PolicyDecision,
    PolicyRequest,
    allow,
    define_capability,
    require_confirmation,
)
from intention_kernel.kernel.approval import operation_digest

from .support import OrderInfo, OrderQuery, make_world, support_agent
from .writes import CHARGE, PAY_ORDER, REFUND, accept, payments_world

PAY_IT = [{"capability": "payments.pay_order", "input": {"amount": 9}}]


async def test_a_required_write_waits_for_its_fact_before_consent_is_asked(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability, [PAY_ORDER])
    world.say("pay it", PAY_IT)
    waiting = await world.run("turn-1", "pay it")
    assert waiting.checkpoint.interaction is None, "no consent without the order"
    [item] = waiting.checkpoint.agenda
    assert item.status == "waiting_for_fact" and item.data["missing"] == ["order@1"]
    assert "digest" not in item.data
    assert [s.status for s in waiting.response.steps] == ["waiting_for_fact"]

    looked = await world.run("turn-2", "where is order 42?")
    assert payments.calls == []
    [item] = looked.checkpoint.agenda
    assert item.status == "awaiting_confirmation"
    assert item.data["relied_on"] == {"order@1": 1}
    assert item.data["digest"] == operation_digest(
        "payments.pay_order", "1.0.0", {"amount": 9}, {"order@1": 1}
    )
    interaction = looked.checkpoint.interaction
    assert interaction is not None and interaction.agenda_item_id == item.id
    assert interaction.prompt in looked.response.text

    done = await world.run("turn-3", "", selection=accept(looked))
    assert done.response.text == "Paid order 42."
    assert payments.calls == ["payments.pay_order:order:42"]
    assert done.checkpoint.agenda == [] and done.checkpoint.interaction is None


async def test_consent_in_the_turn_that_provides_the_fact_covers_its_revision(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability, [PAY_ORDER])
    world.say(
        "look up 42 and pay it",
        [{"capability": "orders.lookup", "input": {"order_id": "42"}}, *PAY_IT],
    )
    proposed = await world.run("turn-1", "look up 42 and pay it")
    [item] = proposed.checkpoint.agenda
    assert item.status == "awaiting_confirmation" and item.data["relied_on"] == {"order@1": 1}
    done = await world.run("turn-2", "", selection=accept(proposed))
    assert done.response.text == "Paid order 42."
    assert payments.calls == ["payments.pay_order:order:42"]


async def test_consent_is_not_asked_when_the_providing_step_of_the_turn_fails(
    durability: DurabilityStore,
) -> None:
    async def broken(context: CapabilityContext, query: OrderQuery) -> Failed:
        return Failed("the order system is down")

    lookup = define_capability(
        id="orders.broken",
        version="1.0.0",
        description="Look up an order in the old system.",
        input=OrderQuery,
        output=OrderInfo,
        provides=["order@1"],
        effect="read",
        execute=broken,
    )
    world, payments = payments_world(durability, [PAY_ORDER, lookup])
    world.say(
        "old lookup and pay",
        [{"capability": "orders.broken", "input": {"order_id": "42"}}, *PAY_IT],
    )
    result = await world.run("turn-1", "old lookup and pay")
    assert result.checkpoint.interaction is None
    [item] = result.checkpoint.agenda
    assert item.status == "waiting_for_fact" and item.data["missing"] == ["order@1"]
    statuses = {s.capability_id: s.status for s in result.response.steps}
    assert statuses == {"orders.broken": "failed", "payments.pay_order": "waiting_for_fact"}
    assert payments.calls == []


async def test_a_read_held_by_a_policy_waits_for_its_fact_before_consent_is_asked(
    durability: DurabilityStore,
) -> None:
    def confirm_tracking(request: PolicyRequest) -> PolicyDecision:
        if request.capability_id == "shipping.track":
            return require_confirmation("tracking needs a yes")
        return allow()

    world = make_world(durability, agent=support_agent(policies=[confirm_tracking]))
    world.say("track it", [{"capability": "shipping.track", "input": {}}])
    world.say("where is order 42?", [{"capability": "orders.lookup", "input": {"order_id": "42"}}])
    waiting = await world.run("turn-1", "track it")
    assert waiting.checkpoint.interaction is None
    [item] = waiting.checkpoint.agenda
    assert item.status == "waiting_for_fact"

    looked = await world.run("turn-2", "where is order 42?")
    assert world.shop.calls == {"orders.lookup": 1}
    [item] = looked.checkpoint.agenda
    assert item.status == "awaiting_confirmation" and item.reason == "tracking needs a yes"
    assert item.data["relied_on"] == {"order@1": 1}

    done = await world.run("turn-3", "", selection=accept(looked))
    assert done.response.text == "Order 42 travels with PostNL."
    assert world.shop.calls == {"orders.lookup": 1, "shipping.track": 1}


async def test_consent_given_without_the_fact_does_not_run_the_step(
    durability: DurabilityStore,
) -> None:
    """A pending confirmation stored without its fact (older releases asked at once) waits."""
    world, payments = payments_world(durability, [PAY_ORDER])
    proposed = await world.run("turn-1", "charge 42")

    def as_pay_order(checkpoint: KernelCheckpoint) -> KernelCheckpoint:
        [item] = checkpoint.agenda
        digest = operation_digest("payments.pay_order", "1.0.0", {"amount": 9}, {})
        data: dict[str, Any] = {"missing": [], "digest": digest, "relied_on": {}}
        legacy = item.model_copy(
            update={"capability_id": "payments.pay_order", "input": {"amount": 9}, "data": data}
        )
        return checkpoint.model_copy(update={"agenda": [legacy]})

    kernel = Kernel(
        durability=durability,
        model=world.gateway,
        ports={"payments": payments, "shop": world.shop},
    )
    extra = define_capability(
        id="payments.other",
        version="1.0.0",
        description="Another charge.",
        input=CHARGE.input_schema,
        output=CHARGE.output_schema,
        effect="write",
        confirmation="required",
        execute=CHARGE.execute,
    )
    agent = kernel.compile(
        support_agent([CHARGE, REFUND, PAY_ORDER, extra]),
        migrations={world.agent.fingerprint: as_pay_order},
    )
    result = await agent.run(thread_id="t1", turn_id="turn-2", text="", selection=accept(proposed))
    assert payments.calls == []
    [item] = result.checkpoint.agenda
    assert item.status == "waiting_for_fact" and item.data["missing"] == ["order@1"]
    assert result.checkpoint.interaction is None
