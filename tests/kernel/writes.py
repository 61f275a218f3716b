"""A payments port and write capabilities for the confirmation and effect tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, JsonValue

from intention_kernel.contracts import (
    DurabilityStore,
    EffectAuthority,
    EffectNotAppliedError,
)
from intention_kernel.kernel import (
    CapabilityContext,
    Completed,
    Failed,
    NeedsConfirmation,
    ProducedFact,
    TurnResult,
    define_capability,
)

from .support import FaqAnswer, World, make_world, support_agent


class Charge(BaseModel):
    order_id: str
    amount: int


class Receipt(BaseModel):
    charge_id: str
    amount: int


@dataclass
class Payments:
    """A provider that honours idempotency keys: one charge per key, however often called."""

    calls: list[str] = field(default_factory=list)
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    lose_response: int = 0
    """Apply the next N writes, then fail as if the response was lost."""
    refuse: int = 0
    """Refuse the next N writes before applying them (provably not applied)."""

    async def charge(self, authority: EffectAuthority, order_id: str, amount: int) -> JsonValue:
        self.calls.append(authority.idempotency_key)
        if self.refuse:
            self.refuse -= 1
            raise EffectNotAppliedError("card declined")
        charge = self.charges.setdefault(
            authority.idempotency_key,
            {"charge_id": f"ch-{len(self.charges) + 1}", "amount": amount},
        )
        if self.lose_response:
            self.lose_response -= 1
            raise ConnectionResetError("response lost")
        return dict(charge)


async def _charge(context: CapabilityContext, charge: Charge) -> Completed:
    payments: Payments = context.ports["payments"]
    effect = await context.run_effect(
        f"order:{charge.order_id}",
        lambda authority: payments.charge(authority, charge.order_id, charge.amount),
    )
    value = effect.value
    assert isinstance(value, dict)
    return Completed(
        output=Receipt(charge_id=str(value["charge_id"]), amount=int(str(value["amount"]))),
        facts=(ProducedFact("payment@1", value),),
        text=f"Charged {charge.amount} EUR for order {charge.order_id}.",
    )


CHARGE = define_capability(
    id="payments.charge",
    version="1.0.0",
    description="Charge the customer for an order.",
    input=Charge,
    output=Receipt,
    provides=["payment@1"],
    effect="write",
    confirmation="required",
    execute=_charge,
)


async def _refund(
    context: CapabilityContext, charge: Charge
) -> Completed | NeedsConfirmation | Failed:
    """Capability-owned consent: asks with domain details, checks the answer, then writes."""
    answer = context.answer
    if answer is None:
        return NeedsConfirmation(
            f"Refund {charge.amount} EUR for order {charge.order_id}?",
            data={"amount": charge.amount},
        )
    if not answer.accepted("yes"):
        return Failed("The refund was not made.")
    payments: Payments = context.ports["payments"]
    effect = await context.run_effect(
        f"refund:{charge.order_id}",
        lambda authority: payments.charge(authority, charge.order_id, -charge.amount),
    )
    value = effect.value
    assert isinstance(value, dict)
    return Completed(
        output=Receipt(charge_id=str(value["charge_id"]), amount=int(str(value["amount"]))),
        text=f"Refunded {charge.amount} EUR for order {charge.order_id}.",
    )


REFUND = define_capability(
    id="payments.refund",
    version="1.0.0",
    description="Refund an order.",
    input=Charge,
    output=Receipt,
    effect="write",
    confirmation="capability",
    execute=_refund,
)


class Pay(BaseModel):
    amount: int


async def _pay_order(context: CapabilityContext, pay: Pay) -> Completed:
    order = context.fact("order@1")
    assert order is not None and isinstance(order.value, dict)
    payments: Payments = context.ports["payments"]
    order_id = str(order.value["order_id"])
    await context.run_effect(
        f"order:{order_id}", lambda authority: payments.charge(authority, order_id, pay.amount)
    )
    return Completed(output=FaqAnswer(answer="paid"), text=f"Paid order {order_id}.")


PAY_ORDER = define_capability(
    id="payments.pay_order",
    version="1.0.0",
    description="Pay the current order.",
    input=Pay,
    output=FaqAnswer,
    requires=["order@1"],
    effect="write",
    confirmation="required",
    execute=_pay_order,
)


CHARGE_42: list[dict[str, Any]] = [
    {"capability": "payments.charge", "input": {"order_id": "42", "amount": 5}}
]
LOOKUP_42: list[dict[str, Any]] = [{"capability": "orders.lookup", "input": {"order_id": "42"}}]


def payments_world(
    durability: DurabilityStore, extra: list[Any] | None = None
) -> tuple[World, Payments]:
    payments = Payments()
    world = make_world(
        durability,
        agent=support_agent([CHARGE, REFUND, *(extra or [])]),
        ports={"payments": payments},
    )
    world.say("charge 42", CHARGE_42)
    world.say("yes", [], answer="yes")
    world.say("no", [], answer="no")
    world.say("where is order 42?", LOOKUP_42)
    return world, payments


def accept(result: TurnResult, option: str = "yes") -> dict[str, JsonValue]:
    """The selection a UI button sends for the result's open interaction."""
    interaction = result.checkpoint.interaction
    assert interaction is not None
    return {"interaction_id": interaction.id, "option": option}


__all__ = [
    "CHARGE",
    "CHARGE_42",
    "LOOKUP_42",
    "PAY_ORDER",
    "REFUND",
    "FaqAnswer",
    "Payments",
    "accept",
    "payments_world",
]
