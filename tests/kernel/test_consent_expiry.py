"""Consent that expires: an accept after the confirmation's deadline runs nothing, is answered
``INTERACTION_EXPIRED`` in kernel words, and the consent is asked again with the values of then
(kernel-owned and capability-owned confirmations, on every store)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from pydantic import BaseModel

from intention_kernel.contracts import DurabilityStore
from intention_kernel.contracts.errors import AgentCompilationError, ErrorCode, InvalidInputError
from intention_kernel.kernel import (
    CapabilityContext,
    Completed,
    Failed,
    Kernel,
    NeedsConfirmation,
    NeedsInput,
    TurnResult,
    define_capability,
)
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

from .support import Clock, World, make_world, support_agent
from .writes import CHARGE, CHARGE_42, Payments, Receipt, accept

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def _decision(result: TurnResult) -> dict[str, Any]:
    decisions = result.checkpoint.metadata["decisions"]
    assert isinstance(decisions, list) and isinstance(decisions[-1], dict)
    return decisions[-1]


def _charge_expiring(after: float | timedelta) -> Any:
    """``payments.charge`` whose kernel confirmation may be accepted for ``after``."""
    return define_capability(
        id=CHARGE.id,
        version=CHARGE.version,
        description=CHARGE.description,
        input=CHARGE.input_schema,
        output=CHARGE.output_schema,
        provides=CHARGE.provides,
        effect="write",
        confirmation="required",
        execute=CHARGE.execute,
        consent_expires_after=after,
    )


def _world(durability: DurabilityStore, *capabilities: Any) -> tuple[World, Payments, Clock]:
    payments, clock = Payments(), Clock(T0)
    world = make_world(
        durability,
        agent=support_agent(list(capabilities)),
        ports={"payments": payments},
        clock=clock,
    )
    world.say("yes", [], answer="yes")
    return world, payments, clock


async def test_a_late_accept_runs_nothing_and_the_consent_is_asked_again(
    durability: DurabilityStore,
) -> None:
    expiring = _charge_expiring(60.0)
    world, payments, clock = _world(durability, expiring)
    world.say("charge 42", CHARGE_42)
    proposed = await world.run("turn-1", "charge 42")
    first = proposed.checkpoint.interaction
    assert first is not None
    assert first.data == {"expires_at": (T0 + timedelta(seconds=60)).isoformat()}

    clock.now = T0 + timedelta(seconds=60)  # the deadline itself is too late
    late = await world.run("turn-2", "", selection=accept(proposed))
    assert payments.calls == []
    assert "expired" in late.response.text and "confirm again" in late.response.text
    decision = _decision(late)
    assert (decision["decision"], decision["code"]) == ("expired", "INTERACTION_EXPIRED")
    assert "confirmation.expired" in world.collector.types("turn-2")
    again = late.checkpoint.interaction
    assert again is not None and again.id != first.id
    assert again.data == {"expires_at": (clock.now + timedelta(seconds=60)).isoformat()}
    [item] = late.checkpoint.agenda
    assert item.input == {"order_id": "42", "amount": 5}

    clock.now += timedelta(seconds=59)  # the new question, in time
    done = await world.run("turn-3", "yes")
    assert payments.calls == ["payments.charge:order:42"]
    assert _decision(done)["decision"] == "accepted"
    assert done.checkpoint.interaction is None and done.checkpoint.agenda == []


async def test_an_accept_in_time_runs_and_a_late_decline_still_cancels(
    durability: DurabilityStore,
) -> None:
    expiring = _charge_expiring(timedelta(minutes=5))
    world, payments, clock = _world(durability, expiring)
    world.say("charge 42", CHARGE_42)
    proposed = await world.run("turn-1", "charge 42")
    clock.now = T0 + timedelta(minutes=4, seconds=59)
    await world.run("turn-2", "", selection=accept(proposed))
    assert payments.calls == ["payments.charge:order:42"]
    world.say(
        "charge 43", [{"capability": "payments.charge", "input": {"order_id": "43", "amount": 1}}]
    )
    asked = await world.run("turn-3", "charge 43")
    clock.now += timedelta(hours=1)
    declined = await world.run("turn-4", "", selection=accept(asked, "no"))
    assert _decision(declined)["decision"] == "declined"
    assert declined.checkpoint.interaction is None and payments.calls == [
        "payments.charge:order:42"
    ]


Result = Completed | NeedsConfirmation | Failed


class Refund(BaseModel):
    order_id: str


def _refund_at_current_price(seconds: float | timedelta) -> Any:
    """Capability-owned consent on a price the provider quotes now (``payments.prices``)."""

    async def execute(
        context: CapabilityContext, refund: Refund
    ) -> Completed | NeedsConfirmation | Failed:
        payments: Payments = context.ports["payments"]
        price = context.ports["prices"][refund.order_id]
        answer = context.answer
        if answer is None:
            return NeedsConfirmation(
                f"Refund {price} EUR for order {refund.order_id}?",
                data={"price": price},
                expires_after=seconds,
            )
        if not answer.accepted("yes") or answer.data.get("price") != price:
            return Failed("The refund was not made.")
        effect = await context.run_effect(
            f"refund:{refund.order_id}",
            lambda authority: payments.charge(authority, refund.order_id, -price),
        )
        value = effect.value
        assert isinstance(value, dict)
        return Completed(
            output=Receipt(charge_id=str(value["charge_id"]), amount=price),
            text=f"Refunded {price} EUR for order {refund.order_id}.",
        )

    return define_capability(
        id="payments.refund_quoted",
        version="1.0.0",
        description="Refund an order at its current price.",
        input=Refund,
        output=Receipt,
        effect="write",
        confirmation="capability",
        execute=execute,
    )


async def test_a_capability_asks_again_with_the_price_of_now(durability: DurabilityStore) -> None:
    prices = {"42": 5}
    payments, clock = Payments(), Clock(T0)
    world = make_world(
        durability,
        agent=support_agent([_refund_at_current_price(30)]),
        ports={"payments": payments, "prices": prices},
        clock=clock,
    )
    world.say("refund 42", [{"capability": "payments.refund_quoted", "input": {"order_id": "42"}}])
    asked = await world.run("turn-1", "refund 42")
    assert asked.checkpoint.interaction is not None
    assert "Refund 5 EUR" in asked.checkpoint.interaction.prompt
    prices["42"] = 7  # the price changed while the question waited
    clock.now = T0 + timedelta(seconds=31)
    late = await world.run("turn-2", "", selection=accept(asked))
    assert payments.calls == []
    assert _decision(late)["code"] == "INTERACTION_EXPIRED"
    again = late.checkpoint.interaction
    assert again is not None and "Refund 7 EUR" in again.prompt
    done = await world.run("turn-3", "", selection=accept(late))
    assert payments.calls == ["payments.refund_quoted:refund:42"]
    assert done.response.text == "Refunded 7 EUR for order 42."


@pytest.mark.parametrize(
    ("expiry", "confirmation"),
    [
        (0, "required"),
        (-5, "required"),
        (float("inf"), "required"),
        ("soon", "required"),
        (400 * 86_400, "required"),
        (60, "capability"),
    ],
)
def test_a_bad_consent_deadline_fails_compilation(expiry: Any, confirmation: str) -> None:
    bad = dataclasses.replace(
        CHARGE, consent_expires_after=expiry, confirmation=cast(Any, confirmation)
    )
    kernel = Kernel(durability=MemoryDurability(), model=ScriptedModelGateway())
    with pytest.raises(AgentCompilationError) as raised:
        kernel.compile(support_agent([bad]))
    assert "invalid_consent_expiry" in str(raised.value)
    assert raised.value.code == ErrorCode.AGENT_COMPILATION_FAILED


async def test_a_capability_with_a_bad_deadline_fails_its_step(durability: DurabilityStore) -> None:
    payments, clock = Payments(), Clock(T0)
    world = make_world(
        durability,
        agent=support_agent([_refund_at_current_price(0)]),
        ports={"payments": payments, "prices": {"42": 5}},
        clock=clock,
    )
    world.say("refund 42", [{"capability": "payments.refund_quoted", "input": {"order_id": "42"}}])
    failed = await world.run("turn-1", "refund 42")
    assert failed.checkpoint.interaction is None and payments.calls == []
    [step] = failed.response.steps
    assert step.status == "failed"
    assert step.reason == "the capability's confirmation has an invalid expires_after"


async def test_the_question_is_closed_by_its_timer_turn_at_the_deadline(
    durability: DurabilityStore,
) -> None:
    world, payments, clock = _world(durability, _charge_expiring(60.0))
    world.say("charge 42", CHARGE_42)
    proposed = await world.run("turn-1", "charge 42")
    question = proposed.checkpoint.interaction
    assert question is not None
    rows: Any = getattr(durability, "schedules")  # noqa: B009 - the store's timers
    deadline = T0 + timedelta(seconds=60)
    assert await rows.due_timers(deadline - timedelta(seconds=1)) == []
    [timer] = await rows.due_timers(deadline)
    assert (timer.turn_id, timer.due_at) == (f"{question.id}@expires", deadline)
    assert timer.selection == {"expire_interaction": question.id}

    clock.now = deadline  # the kernel's clock; the scheduler's is the same moment
    scheduler = world.agent.scheduler(clock=clock)
    assert await scheduler.tick() > 0  # submits the question's turn, forgets the timer
    assert scheduler.fired == 1 and await rows.next_timer() is None
    request = await durability.inbox.get("t1", timer.turn_id)  # type: ignore[attr-defined]
    assert request is not None and request.selection == timer.selection
    calls = world.gateway.count()
    closed = await world.agent.run(
        thread_id="t1", turn_id=timer.turn_id, text="", selection=timer.selection
    )
    assert world.gateway.count() == calls  # the kernel's words: no model call
    assert closed.checkpoint.interaction is None and closed.checkpoint.agenda == []
    assert closed.response.text.startswith("The question expired (Charge the customer")
    decision = _decision(closed)
    assert (decision["decision"], decision["via"]) == ("expired", "timer")
    assert payments.calls == []
    with pytest.raises(InvalidInputError) as late:  # the old button answers nothing now
        await world.run("turn-3", "", selection=accept(proposed))
    assert late.value.code == ErrorCode.INTERACTION_NOT_ACTIVE


async def test_a_question_answered_in_time_drops_its_timer_unsubmitted(
    durability: DurabilityStore,
) -> None:
    world, payments, clock = _world(durability, _charge_expiring(60.0))
    world.say("charge 42", CHARGE_42)
    proposed = await world.run("turn-1", "charge 42")
    clock.now = T0 + timedelta(seconds=30)
    await world.run("turn-2", "", selection=accept(proposed))
    assert payments.calls == ["payments.charge:order:42"]
    clock.now = T0 + timedelta(seconds=61)
    scheduler = world.agent.scheduler(clock=clock)
    await scheduler.tick()
    rows: Any = getattr(durability, "schedules")  # noqa: B009 - the store's timers
    assert scheduler.fired == 1 and await rows.next_timer() is None
    inbox: Any = getattr(durability, "inbox")  # noqa: B009
    assert await inbox.list_requests(thread_id="t1") == []  # nothing was submitted


class Address(BaseModel):
    order_id: str


def _shipping(ask: Any) -> Any:
    """``orders.ship``, which asks the user (``ask``) where to ship."""
    return define_capability(
        id="orders.ship",
        version="1.0.0",
        description="Ship an order.",
        input=Address,
        output=Receipt,
        execute=ask,
    )


async def test_an_input_question_closes_at_its_deadline(durability: DurabilityStore) -> None:
    async def ask(context: CapabilityContext, order: Address) -> NeedsInput:
        return NeedsInput(prompt="Where should it go?", fields=("address",), expires_after=90)

    world, _, clock = _world(durability, _shipping(ask))
    world.say("ship 42", [{"capability": "orders.ship", "input": {"order_id": "42"}}])
    asked = await world.run("turn-1", "ship 42")
    question = asked.checkpoint.interaction
    assert question is not None and question.kind == "input"
    deadline = T0 + timedelta(seconds=90)
    assert question.data == {"expires_at": deadline.isoformat()}
    clock.now = deadline
    scheduler = world.agent.scheduler(clock=clock)
    await scheduler.tick()
    assert scheduler.fired == 1
    closed = await world.agent.run(
        thread_id="t1",
        turn_id=f"{question.id}@expires",
        text="",
        selection={"expire_interaction": question.id},
    )
    assert closed.checkpoint.interaction is None and closed.checkpoint.agenda == []
    assert closed.response.text.startswith("The question expired (Ship an order")


async def test_an_input_question_with_a_bad_deadline_fails_its_step(
    durability: DurabilityStore,
) -> None:
    async def ask(context: CapabilityContext, order: Address) -> NeedsInput:
        return NeedsInput(prompt="Where?", expires_after=-1)

    world, _, _ = _world(durability, _shipping(ask))
    world.say("ship 42", [{"capability": "orders.ship", "input": {"order_id": "42"}}])
    failed = await world.run("turn-1", "ship 42")
    [step] = failed.response.steps
    assert step.reason == "the capability's question has an invalid expires_after"
    assert failed.checkpoint.interaction is None
