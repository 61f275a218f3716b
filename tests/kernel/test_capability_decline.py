"""A declined capability-owned confirmation is cancelled by the kernel, like a kernel-owned one.

The capability is resumed only for an accepting option (``NeedsConfirmation.accept``); a decline
never reaches it, never reaches ``run_effect``, and is recorded (decision + audit event).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import DurabilityStore, ErrorCode, UsageError
from intention_kernel.kernel import (
    CapabilityContext,
    Completed,
    ConfirmationAnswer,
    Failed,
    NeedsConfirmation,
    TurnInfo,
    define_capability,
)

from .writes import Charge, Payments, Receipt, accept, payments_world

REFUND_42: list[dict[str, Any]] = [
    {"capability": "payments.refund", "input": {"order_id": "42", "amount": 5}}
]


def _refund_calls(world: Any) -> list[str]:
    return [
        str(e.data["capability_id"])
        for e in world.collector.of_type("step.started")
        if isinstance(e.data, dict) and e.data.get("capability_id") == "payments.refund"
    ]


@pytest.mark.parametrize("via", ["selection", "text"])
async def test_a_declined_capability_confirmation_is_cancelled_by_the_kernel(
    durability: DurabilityStore, via: str
) -> None:
    world, payments = payments_world(durability)
    world.say("refund 42", REFUND_42)
    asked = await world.run("turn-1", "refund 42")
    assert len(_refund_calls(world)) == 1
    if via == "selection":
        declined = await world.run(
            "turn-2", "", selection=accept(asked, "no"), host_context={"actor": "bob"}
        )
    else:
        declined = await world.run("turn-2", "no", host_context={"actor": "bob"})
    assert payments.calls == []
    assert len(_refund_calls(world)) == 1  # the capability was not run again
    assert declined.response.text == "Cancelled: Refund an order. Nothing was done."
    assert declined.response.kind == "fallback" and declined.response.steps == []
    assert declined.checkpoint.agenda == [] and declined.checkpoint.interaction is None
    decisions = declined.checkpoint.metadata["decisions"]
    assert isinstance(decisions, list)
    [decision] = decisions
    assert isinstance(decision, dict)
    assert decision["decision"] == "declined" and decision["option"] == "no"
    assert decision["actor"] == "bob" and decision["via"] == via
    assert decision["capability_id"] == "payments.refund"
    [event] = [e for e in world.collector.for_turn("turn-2") if e.type == "confirmation.declined"]
    assert isinstance(event.data, dict) and event.data["details"] == {"amount": 5}
    stored = await durability.read_outbox(thread_id="t1", turn_id="turn-2")
    assert "confirmation.declined" in [e.event.type for e in stored]
    # Answering again finds nothing pending; the same decline redelivered replays, runs nothing.
    again = await world.run("turn-3", "yes")
    assert again.response.kind == "clarification"
    assert payments.calls == [] and len(_refund_calls(world)) == 1


async def _choose_refund(
    context: CapabilityContext, charge: Charge
) -> Completed | NeedsConfirmation | Failed:
    answer = context.answer
    if answer is None:
        return NeedsConfirmation(
            f"Refund {charge.amount} EUR for order {charge.order_id}: to card or as a voucher?",
            options=("to card", "voucher", "keep the order"),
            accept=("to card", "voucher"),
            data={"amount": charge.amount, "hold": "hold-1"},
        )
    if not answer.accepted():
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
        text=f"Refunded {charge.amount} EUR for order {charge.order_id} ({answer.option}).",
    )


CHOOSE_REFUND = define_capability(
    id="payments.refund_choice",
    version="1.0.0",
    description="Refund an order to card or as a voucher.",
    input=Charge,
    output=Receipt,
    effect="write",
    confirmation="capability",
    execute=_choose_refund,
)
CHOICE_42: list[dict[str, Any]] = [
    {"capability": "payments.refund_choice", "input": {"order_id": "42", "amount": 5}}
]


async def test_only_the_declared_accepting_options_resume_the_capability(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability, [CHOOSE_REFUND])
    world.say("refund 42", CHOICE_42)
    asked = await world.run("turn-1", "refund 42")
    [item] = asked.checkpoint.agenda
    assert item.data["accept"] == ["to card", "voucher"]
    assert asked.checkpoint.interaction is not None
    assert asked.checkpoint.interaction.options == ["to card", "voucher", "keep the order"]
    kept = await world.run("turn-2", "", selection=accept(asked, "keep the order"))
    assert (
        kept.response.text
        == "Cancelled: Refund an order to card or as a voucher. Nothing was done."
    )
    assert payments.calls == []
    [event] = [e for e in world.collector.for_turn("turn-2") if e.type == "confirmation.declined"]
    assert isinstance(event.data, dict)
    assert event.data["details"] == {"amount": 5, "hold": "hold-1"}

    asked = await world.run("turn-3", "refund 42")
    done = await world.run("turn-4", "", selection=accept(asked, "voucher"))
    assert done.response.text == "Refunded 5 EUR for order 42 (voucher)."
    assert payments.calls == ["payments.refund_choice:refund:42"]
    decisions = done.checkpoint.metadata["decisions"]
    assert isinstance(decisions, list) and isinstance(decisions[-1], dict)
    assert decisions[-1]["decision"] == "answered" and decisions[-1]["option"] == "voucher"


async def test_a_confirmation_without_a_valid_accepting_option_fails_before_asking(
    durability: DurabilityStore,
) -> None:
    async def ask(context: CapabilityContext, charge: Charge) -> NeedsConfirmation:
        return NeedsConfirmation("Go ahead?", options=("ok", "cancel"))  # accept is ("yes",)

    cap = define_capability(
        id="payments.vague",
        version="1.0.0",
        description="Ask without saying which answer consents.",
        input=Charge,
        output=Receipt,
        effect="write",
        confirmation="capability",
        execute=ask,
    )
    world, payments = payments_world(durability, [cap])
    world.say("vague", [{"capability": "payments.vague", "input": {"order_id": "1", "amount": 1}}])
    result = await world.run("turn-1", "vague")
    [step] = result.response.steps
    assert step.status == "failed"
    assert step.reason == "the capability's confirmation names no valid accepting option"
    assert result.checkpoint.interaction is None and result.checkpoint.agenda == []
    assert payments.calls == []


async def test_an_item_stored_without_accepting_options_accepts_only_yes(
    durability: DurabilityStore,
) -> None:
    """A pending item from before ``accept`` was recorded: anything but "yes" declines."""
    from intention_kernel.contracts import KernelCheckpoint
    from intention_kernel.kernel import Kernel

    from .support import support_agent
    from .writes import CHARGE, REFUND

    world, payments = payments_world(durability, [CHOOSE_REFUND])
    world.say("refund 42", CHOICE_42)
    asked = await world.run("turn-1", "refund 42")

    def migrate(checkpoint: KernelCheckpoint) -> KernelCheckpoint:
        [item] = checkpoint.agenda
        data = {k: v for k, v in item.data.items() if k != "accept"}
        return checkpoint.model_copy(update={"agenda": [item.model_copy(update={"data": data})]})

    kernel = Kernel(
        durability=durability, model=world.gateway, ports={"payments": payments, "shop": world.shop}
    )
    extra = define_capability(
        id="faq.extra",
        version="1.0.0",
        description="Another capability (a new fingerprint).",
        input=Charge,
        output=Receipt,
        execute=_choose_refund,
    )
    agent = kernel.compile(
        support_agent([CHARGE, REFUND, CHOOSE_REFUND, extra]),
        migrations={world.agent.fingerprint: migrate},
    )
    result = await agent.run(
        thread_id="t1", turn_id="turn-2", text="", selection=accept(asked, "voucher")
    )
    assert result.response.text.startswith("Cancelled:")
    assert payments.calls == []


class _NoScope:
    async def run_effect(self, *args: Any, **options: Any) -> Any:
        raise AssertionError("run_effect must be refused before the scope is reached")


async def test_run_effect_is_refused_with_a_declining_answer() -> None:
    """Defence in depth: even if a declining answer reached a capability, it cannot write."""
    answer = ConfirmationAnswer("ia-1", "no", {}, None, "2026-01-01T00:00:00+00:00", "d")
    context = CapabilityContext(
        scope=_NoScope(),  # type: ignore[arg-type]
        capability_id="payments.refund",
        effect="write",
        step_id="s1",
        execution_id="exec-1",
        turn=TurnInfo("t1", "turn-1", "trace-1", "", None),
        ports={},
        facts={},
        host_context={},
        events=None,  # type: ignore[arg-type]
        deadline=0.0,
        confirmation="capability",
        answer=answer,
    )

    async def operation(authority: Any) -> JsonValue:
        raise AssertionError("never called")

    with pytest.raises(UsageError) as info:
        await context.run_effect("refund:42", operation)
    assert info.value.code == ErrorCode.CONFIRMATION_REQUIRED
    accepted = ConfirmationAnswer(
        "ia-1", "voucher", {}, None, "2026-01-01T00:00:00+00:00", "d", ("to card", "voucher")
    )
    assert accepted.accepted() and not answer.accepted()
