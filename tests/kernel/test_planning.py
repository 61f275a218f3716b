"""Planning: confirmation holds, policies, fact prerequisites and dependency order."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, JsonValue

from intention_kernel.contracts import DurabilityStore
from intention_kernel.kernel import (
    Completed,
    KernelLimits,
    PolicyDecision,
    PolicyRequest,
    allow,
    define_agent,
    define_capability,
    deny,
)
from intention_kernel.kernel._pipeline.plan import build_plan
from intention_kernel.kernel._pipeline.state import AgentRuntime
from intention_kernel.kernel._prompts import Catalog
from intention_kernel.kernel._visibility import FactView

from .support import FaqAnswer, FaqQuery, make_world, support_agent


class Charge(BaseModel):
    order_id: str
    amount: int


async def _charge(context: Any, charge: Charge) -> Completed:
    raise AssertionError("a write with confirmation='required' must not run when proposed")


CHARGE = define_capability(
    id="payments.charge",
    version="1.0.0",
    description="Charge the customer for an order.",
    input=Charge,
    output=FaqAnswer,
    effect="write",
    confirmation="required",
    execute=_charge,
)


async def test_required_confirmation_holds_the_write_and_keeps_it_pending(
    durability: DurabilityStore,
) -> None:
    world = make_world(durability, agent=support_agent([CHARGE]))
    world.say(
        "charge 42", [{"capability": "payments.charge", "input": {"order_id": "42", "amount": 5}}]
    )
    first = await world.run("turn-1", "charge 42")
    [item] = first.checkpoint.agenda
    assert item.status == "awaiting_confirmation" and item.capability_id == "payments.charge"
    assert item.input == {"order_id": "42", "amount": 5}
    interaction = first.checkpoint.interaction
    assert interaction is not None and interaction.kind == "confirmation"
    assert interaction.agenda_item_id == item.id
    assert first.response.interaction == interaction
    assert interaction.prompt in first.response.text

    # An unrelated safe question is answered while the confirmation stays pending.
    world.say("where is order 42?", [{"capability": "orders.lookup", "input": {"order_id": "42"}}])
    second = await world.run("turn-2", "where is order 42?")
    assert second.response.text == "Order 42 has shipped."
    assert second.checkpoint.interaction == interaction
    assert second.checkpoint.agenda == [item]
    assert [f.id for f in second.checkpoint.facts] == ["order@1"]


async def test_policy_can_deny_with_a_safe_reason(durability: DurabilityStore) -> None:
    def no_faq(request: PolicyRequest) -> PolicyDecision:
        return (
            deny("I can't answer policy questions here.")
            if request.capability_id == "faq.search"
            else allow()
        )

    world = make_world(durability, agent=support_agent(policies=[no_faq]))
    world.say("returns?", [{"capability": "faq.search", "input": {"topic": "returns"}}])
    result = await world.run("turn-1", "returns?")
    assert world.shop.total() == 0
    assert result.response.kind == "clarification"
    assert result.response.text == "I can't answer policy questions here."


# ---------------------------------------------------------------- pure planner properties


async def _nothing(context: Any, query: Any) -> Completed:
    return Completed(output={"answer": "-"})


def _runtime(caps: list[Any]) -> AgentRuntime:
    """A runtime without compile: the planner must also cope with unprovided facts."""
    agent = define_agent(id="p", version="1.0.0", description="planner", capabilities=caps)
    return AgentRuntime(
        definition=agent,
        fingerprint="fp",
        capabilities={c.id: c for c in caps},
        catalog=Catalog(caps),
        routes={},
        ports={},
        limits=KernelLimits(),
        composition_schema={},
        facts=FactView(()),
        clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
        ids=lambda prefix: f"{prefix}_1",
    )


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sets(st.sampled_from(["a@1", "b@1", "c@1", "d@1"]), max_size=2),
            st.sets(st.sampled_from(["a@1", "b@1", "c@1", "d@1"]), max_size=2),
        ),
        min_size=1,
        max_size=6,
    ),
    st.sets(st.sampled_from(["a@1", "b@1", "c@1", "d@1"])),
)
def test_planned_order_respects_every_dependency(
    shape: list[tuple[set[str], set[str]]], in_checkpoint: set[str]
) -> None:
    caps = [
        define_capability(
            id=f"cap.n{i}",
            version="1.0.0",
            description="x",
            input=FaqQuery,
            output=FaqAnswer,
            requires=sorted(req - prov),
            provides=sorted(prov),
            execute=_nothing,
        )
        for i, (req, prov) in enumerate(shape)
    ]
    runtime = _runtime(caps)
    from intention_kernel.contracts import FactRecord

    facts = {
        ref: FactRecord(id=ref, type=ref.split("@")[0], version=1, value=1, turn_id="t0")
        for ref in in_checkpoint
    }
    valid: list[tuple[Any, BaseModel, dict[str, JsonValue]]] = [
        (c, FaqQuery(topic="x"), {"topic": "x"}) for c in caps
    ]
    plan = build_plan(runtime, facts, valid, {})
    assert len(plan.steps) + len(plan.held) == len(caps)
    position = {s.step_id: n for n, s in enumerate(plan.steps)}
    produced_here = {r for s in plan.steps for r in s.capability.provides}
    for step in plan.steps:
        for dep in step.after:
            assert position[dep] < position[step.step_id]
        for ref in step.capability.requires:
            assert ref in in_checkpoint or ref in produced_here
    for held in plan.held:
        assert held.status == "waiting_for_fact"


async def test_policy_can_require_confirmation(durability: DurabilityStore) -> None:
    from intention_kernel.kernel import require_confirmation

    def confirm_faq(request: PolicyRequest) -> PolicyDecision:
        if request.capability_id == "faq.search":
            return require_confirmation("policy answers need a yes")
        return allow()

    world = make_world(durability, agent=support_agent(policies=[confirm_faq]))
    world.say("returns?", [{"capability": "faq.search", "input": {"topic": "returns"}}])
    result = await world.run("turn-1", "returns?")
    assert world.shop.total() == 0
    [item] = result.checkpoint.agenda
    assert item.status == "awaiting_confirmation" and item.reason == "policy answers need a yes"
    assert result.checkpoint.interaction is not None


async def test_capability_owned_confirmation_opens_its_own_interaction(
    durability: DurabilityStore,
) -> None:
    from intention_kernel.kernel import NeedsConfirmation

    async def ask_first(context: Any, charge: Charge) -> NeedsConfirmation:
        return NeedsConfirmation(
            f"Charge {charge.amount} EUR for order {charge.order_id}?", data={"amount": 5}
        )

    cap = define_capability(
        id="payments.refund",
        version="1.0.0",
        description="Refund an order.",
        input=Charge,
        output=FaqAnswer,
        effect="write",
        confirmation="capability",
        execute=ask_first,
    )
    world = make_world(durability, agent=support_agent([cap]))
    refund = {"capability": "payments.refund", "input": {"order_id": "42", "amount": 5}}
    world.say("refund 42", [refund])
    result = await world.run("turn-1", "refund 42")
    interaction = result.checkpoint.interaction
    assert interaction is not None and interaction.kind == "confirmation"
    # The capability's words, then every field the consent covers.
    assert interaction.prompt == "Charge 5 EUR for order 42? (order_id: 42, amount: 5)"
    assert interaction.options == ["yes", "no"]
    assert result.checkpoint.receipts == []
    assert result.checkpoint.agenda[0].data["amount"] == 5
