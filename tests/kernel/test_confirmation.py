"""Confirmation: accept, decline, restatements, refused answers and consent bound to a digest."""

from __future__ import annotations

from typing import Any

import pytest

from intention_kernel.contracts import DurabilityStore, ErrorCode, InvalidInputError
from intention_kernel.kernel import (
    CapabilityContext,
    Kernel,
    NeedsConfirmation,
    define_capability,
)
from intention_kernel.kernel.approval import operation_digest

from .support import FaqAnswer
from .writes import CHARGE_42, PAY_ORDER, Charge, Payments, accept, payments_world


async def test_accepting_by_selection_runs_the_write_once_with_an_approval_record(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")
    assert payments.calls == []
    [item] = proposed.checkpoint.agenda
    assert item.data["digest"] == operation_digest(
        "payments.charge", "1.0.0", {"order_id": "42", "amount": 5}, {}
    )
    done = await world.run(
        "turn-2", "", selection=accept(proposed), host_context={"actor": "ann@example.com"}
    )
    assert payments.calls == ["payments.charge:order:42"]
    assert done.response.text == "Charged 5 EUR for order 42."
    assert done.checkpoint.agenda == [] and done.checkpoint.interaction is None
    [decision] = done.checkpoint.metadata["decisions"]
    assert isinstance(decision, dict)
    assert decision["decision"] == "accepted" and decision["actor"] == "ann@example.com"
    assert decision["digest"] == item.data["digest"] and decision["via"] == "selection"
    assert decision["interaction_id"] == proposed.checkpoint.interaction.id
    assert "confirmation.accepted" in world.collector.types("turn-2")
    assert world.gateway.count("interpret") == 1  # a button press needs no interpretation

    # Accepting twice: the interaction is gone; the UI gets a typed error, typed text a
    # clarification; nothing runs either way.
    with pytest.raises(InvalidInputError) as info:
        await world.run("turn-3", "", selection=accept(proposed))
    assert info.value.code == ErrorCode.INTERACTION_NOT_ACTIVE
    again = await world.run("turn-3", "yes")
    assert again.response.kind == "clarification"
    assert "nothing waiting" in again.response.text
    assert payments.calls == ["payments.charge:order:42"]


async def test_accepting_by_typed_text_and_replaying_that_turn_runs_nothing_more(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    await world.run("turn-1", "charge 42")
    first = await world.run("turn-2", "yes")
    assert payments.calls == ["payments.charge:order:42"]
    calls = world.gateway.count()
    replay = await world.run("turn-2", "yes")
    assert replay.replayed and replay.response == first.response
    assert payments.calls == ["payments.charge:order:42"]
    assert world.gateway.count() == calls


async def test_decline_cancels_the_pending_write(durability: DurabilityStore) -> None:
    world, payments = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")
    declined = await world.run("turn-2", "", selection=accept(proposed, "no"))
    assert payments.calls == []
    assert declined.checkpoint.agenda == [] and declined.checkpoint.interaction is None
    assert declined.response.text.startswith("Cancelled: Charge the customer for an order.")
    decisions = declined.checkpoint.metadata["decisions"]
    assert isinstance(decisions, list) and decisions[0]["decision"] == "declined"
    # Declining by text works the same way.
    await world.run("turn-3", "charge 42")
    await world.run("turn-4", "no")
    assert payments.calls == []


async def test_an_unrelated_question_keeps_the_confirmation_and_the_new_work(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")
    meanwhile = await world.run("turn-2", "where is order 42?")
    assert meanwhile.response.text == "Order 42 has shipped."
    assert meanwhile.checkpoint.interaction == proposed.checkpoint.interaction
    assert meanwhile.checkpoint.agenda == proposed.checkpoint.agenda
    assert [f.id for f in meanwhile.checkpoint.facts] == ["order@1"]
    done = await world.run("turn-3", "", selection=accept(proposed))
    assert [s.status for s in done.response.steps] == ["completed"]
    assert payments.calls == ["payments.charge:order:42"]


async def test_answers_to_unknown_or_inactive_interactions_or_options_are_refused(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")
    cases: list[tuple[dict[str, Any], ErrorCode]] = [
        ({"interaction_id": "ia-unknown", "option": "yes"}, ErrorCode.INTERACTION_NOT_ACTIVE),
        ({**accept(proposed), "option": "maybe"}, ErrorCode.INTERACTION_OPTION_UNKNOWN),
        ({**accept(proposed), "option": 1}, ErrorCode.INTERACTION_OPTION_UNKNOWN),
        ({**accept(proposed), "thread_id": "t2"}, ErrorCode.INTERACTION_NOT_ACTIVE),
    ]
    for n, (selection, code) in enumerate(cases):
        with pytest.raises(InvalidInputError) as info:
            await world.run(f"bad-{n}", "", selection=selection)
        assert info.value.code == code
    # An answer from another thread names an interaction that thread never had.
    other = await world.run("turn-1", "charge 42", thread_id="t2")
    assert other.checkpoint.interaction != proposed.checkpoint.interaction
    with pytest.raises(InvalidInputError) as info:
        await world.run("turn-2", "", thread_id="t2", selection=accept(proposed))
    assert info.value.code == ErrorCode.INTERACTION_NOT_ACTIVE
    assert payments.calls == []
    stored = await durability.load_checkpoint("t1")
    assert stored is not None and stored.revision == 1  # nothing committed half-way


async def test_typed_answers_the_model_misread_become_clarifications(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    await world.run("turn-1", "charge 42")
    world.say("perhaps", [], answer="perhaps")
    unclear = await world.run("turn-2", "perhaps")
    assert unclear.response.text == "Please answer with one of: yes, no."
    assert unclear.checkpoint.interaction is not None
    assert payments.calls == []


async def test_a_model_restatement_merges_into_the_pending_operation(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")
    again = await world.run("turn-2", "charge 42")  # restated, not an answer
    assert again.checkpoint.agenda == proposed.checkpoint.agenda
    assert again.checkpoint.interaction == proposed.checkpoint.interaction
    assert "already waiting for your confirmation" in again.response.text
    assert again.response.interaction == proposed.checkpoint.interaction
    world.say("yes, charge order 42", CHARGE_42, answer="yes")
    done = await world.run("turn-3", "yes, charge order 42")
    assert [s.status for s in done.response.steps] == ["completed"]
    assert payments.calls == ["payments.charge:order:42"]
    assert done.checkpoint.agenda == []


async def test_a_second_write_waits_its_turn_and_is_asked_next(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    world.say(
        "charge 43", [{"capability": "payments.charge", "input": {"order_id": "43", "amount": 7}}]
    )
    first = await world.run("turn-1", "charge 42")
    second = await world.run("turn-2", "charge 43")
    assert second.checkpoint.interaction == first.checkpoint.interaction
    assert len(second.checkpoint.agenda) == 2
    after_first = await world.run("turn-3", "yes")
    nxt = after_first.checkpoint.interaction
    assert nxt is not None and nxt.agenda_item_id == second.checkpoint.agenda[1].id
    assert nxt.prompt in after_first.response.text
    await world.run("turn-4", "yes")
    assert payments.calls == ["payments.charge:order:42", "payments.charge:order:43"]


# ------------------------------------------------------------------ consent bound to a digest


async def test_a_replaced_fact_breaks_the_digest_and_the_user_is_asked_again(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability, [PAY_ORDER])
    world.say("pay it", [{"capability": "payments.pay_order", "input": {"amount": 9}}])
    await world.run("turn-1", "where is order 42?")
    proposed = await world.run("turn-2", "pay it")
    [item] = proposed.checkpoint.agenda
    assert item.data["relied_on"] == {"order@1": 1}
    await world.run("turn-3", "where is order 42?")  # order@1 is replaced: revision 2
    changed = await world.run("turn-4", "", selection=accept(proposed))
    assert payments.calls == []
    assert "Something changed since you were asked" in changed.response.text
    fresh = changed.checkpoint.interaction
    assert fresh is not None and fresh.id != proposed.checkpoint.interaction.id
    [again] = changed.checkpoint.agenda
    assert again.data["relied_on"] == {"order@1": 2}
    decisions = changed.checkpoint.metadata["decisions"]
    assert isinstance(decisions, list) and decisions[-1]["decision"] == "changed"
    done = await world.run("turn-5", "", selection=accept(changed))
    assert done.response.text == "Paid order 42."
    assert payments.calls == ["payments.pay_order:order:42"]


async def test_a_changed_capability_version_is_not_run_on_an_old_approval(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")
    from .support import support_agent
    from .writes import CHARGE, REFUND

    newer = define_capability(
        **{**_spec(CHARGE), "version": "1.1.0"},
    )
    kernel = Kernel(
        durability=durability, model=world.gateway, ports={"payments": payments, "shop": world.shop}
    )
    agent = kernel.compile(
        support_agent([newer, REFUND]), compatible_with=[world.agent.fingerprint]
    )
    result = await agent.run(thread_id="t1", turn_id="turn-2", text="", selection=accept(proposed))
    assert payments.calls == []
    assert "no longer do that" in result.response.text
    assert result.checkpoint.agenda == []


def _spec(cap: Any) -> dict[str, Any]:
    return {
        "id": cap.id,
        "version": cap.version,
        "description": cap.description,
        "input": cap.input_schema,
        "output": cap.output_schema,
        "provides": list(cap.provides),
        "effect": cap.effect,
        "confirmation": cap.confirmation,
        "execute": cap.execute,
    }


# ------------------------------------------------------------------ capability-owned consent


async def test_a_capability_owned_confirmation_gets_the_answer_and_checks_it(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    refund = [{"capability": "payments.refund", "input": {"order_id": "42", "amount": 5}}]
    world.say("refund 42", refund)
    asked = await world.run("turn-1", "refund 42")
    assert asked.response.interaction is not None
    assert (
        asked.response.interaction.prompt == "Refund 5 EUR for order 42? (order_id: 42, amount: 5)"
    )
    assert payments.calls == []
    declined = await world.run("turn-2", "no")
    assert declined.response.text == "Cancelled: Refund an order. Nothing was done."
    assert payments.calls == []
    await world.run("turn-3", "refund 42")
    done = await world.run("turn-4", "yes", host_context={"actor": "bob"})
    assert done.response.text == "Refunded 5 EUR for order 42."
    assert payments.calls == ["payments.refund:refund:42"]
    decisions = done.checkpoint.metadata["decisions"]
    assert isinstance(decisions, list) and decisions[-1]["actor"] == "bob"


async def test_a_capability_writing_before_consent_is_caught(durability: DurabilityStore) -> None:
    """The validation test a capability author writes: run_effect before consent fails."""

    async def eager(context: CapabilityContext, charge: Charge) -> NeedsConfirmation:
        payments: Payments = context.ports["payments"]
        await context.run_effect(
            "eager", lambda authority: payments.charge(authority, charge.order_id, 1)
        )
        return NeedsConfirmation("Was that all right?")

    cap = define_capability(
        id="payments.eager",
        version="1.0.0",
        description="Charge first, ask later.",
        input=Charge,
        output=FaqAnswer,
        effect="write",
        confirmation="capability",
        execute=eager,
    )
    world, payments = payments_world(durability, [cap])
    world.say("eager", [{"capability": "payments.eager", "input": {"order_id": "1", "amount": 1}}])
    result = await world.run("turn-1", "eager")
    [step] = result.response.steps
    assert step.status == "failed" and step.retryable is False
    assert payments.calls == [] and result.checkpoint.receipts == []
    assert result.checkpoint.interaction is None  # nothing is asked after a write was tried
    outbox = await durability.read_outbox(thread_id="t1")
    [failed] = [s.event for s in outbox if s.event.type == "step.failed"]
    assert failed.data["error"] == {
        "type": "intention_kernel.contracts.errors.UsageError",
        "retryable": False,
        "code": str(ErrorCode.CONFIRMATION_REQUIRED),
    }


async def test_a_policy_required_confirmation_runs_after_acceptance(
    durability: DurabilityStore,
) -> None:
    from intention_kernel.kernel import PolicyDecision, PolicyRequest, allow, require_confirmation

    from .support import make_world, support_agent

    def confirm_faq(request: PolicyRequest) -> PolicyDecision:
        if request.capability_id == "faq.search":
            return require_confirmation("policy answers need a yes")
        return allow()

    world = make_world(durability, agent=support_agent(policies=[confirm_faq]))
    world.say("returns?", [{"capability": "faq.search", "input": {"topic": "returns"}}])
    held = await world.run("turn-1", "returns?")
    assert world.shop.total() == 0
    done = await world.run("turn-2", "", selection=accept(held))
    assert done.response.text == "About returns: 30 days."
    assert world.shop.calls == {"faq.search": 1}


async def test_a_changed_input_breaks_the_digest(durability: DurabilityStore) -> None:
    """Whatever rewrote the pending operation (here a migration), the old consent is void."""
    from intention_kernel.contracts import KernelCheckpoint

    from .support import support_agent
    from .writes import CHARGE, REFUND

    world, payments = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")

    def migrate(checkpoint: KernelCheckpoint) -> KernelCheckpoint:
        [item] = checkpoint.agenda
        changed = item.model_copy(update={"input": {"order_id": "42", "amount": 500}})
        return checkpoint.model_copy(update={"agenda": [changed]})

    kernel = Kernel(
        durability=durability,
        model=world.gateway,
        ports={"payments": payments, "shop": world.shop},
    )
    extra = define_capability(**{**_spec(CHARGE), "id": "payments.extra"})
    agent = kernel.compile(
        support_agent([CHARGE, REFUND, extra]), migrations={world.agent.fingerprint: migrate}
    )
    result = await agent.run(thread_id="t1", turn_id="turn-2", text="", selection=accept(proposed))
    assert payments.calls == []
    assert "the operation is not the same any more" in result.response.text
    [item] = result.checkpoint.agenda
    assert item.input == {"order_id": "42", "amount": 500}
    assert result.checkpoint.interaction is not None
    assert "amount: 500" in result.checkpoint.interaction.prompt
