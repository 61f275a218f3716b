"""Effect outcomes reach the user safely: uncertain, not applied, crashes around the call."""

from __future__ import annotations

import pytest

from intention_kernel.contracts import (
    DurabilityStore,
    EffectAuthority,
    ErrorCode,
    InvalidInputError,
    ReceiptStatus,
)
from intention_kernel.kernel import provider_idempotency_key
from intention_kernel.testing import CrashPoint, SimulatedCrash, crash_hook, raise_at

from .writes import accept, payments_world

KEY = "payments.charge:order:42"


async def test_a_lost_response_commits_a_being_verified_answer_and_is_never_retried(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    payments.lose_response = 1
    proposed = await world.run("turn-1", "charge 42")
    lost = await world.run("turn-2", "", selection=accept(proposed))
    text = lost.response.text
    assert "being verified" in text and "Charged" not in text
    assert [s.status for s in lost.response.steps] == ["uncertain"]
    [receipt] = lost.checkpoint.receipts
    assert receipt.status is ReceiptStatus.UNCERTAIN and receipt.idempotency_key == KEY
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None and stored.status is ReceiptStatus.UNCERTAIN
    assert receipt.id == stored.id
    outbox = [e.event for e in await durability.read_outbox(thread_id="t1", turn_id="turn-2")]
    [audit] = [e for e in outbox if e.type == "effect.uncertain"]
    assert audit.data["receipt_id"] == stored.id and audit.category == "audit"

    # The same turn delivered again replays the answer; nothing is called.
    replay = await world.run("turn-2", "", selection=accept(proposed))
    assert replay.replayed and replay.response.text == text
    # Asking again later reports the same, never calls the provider again.
    await world.run("turn-3", "charge 42")
    again = await world.run("turn-4", "yes")
    assert "being verified" in again.response.text
    assert payments.calls == [KEY]

    # An operator reconciles; the next attempt replays the provider's value.
    await durability.reconcile(
        "t1", KEY, "completed", value={"charge_id": "ch-1", "amount": 5}, note="found", actor="ops"
    )
    await world.run("turn-5", "charge 42")
    done = await world.run("turn-6", "yes")
    assert done.response.text == "Charged 5 EUR for order 42."
    assert payments.calls == [KEY]
    assert done.checkpoint.receipts[-1].status is ReceiptStatus.COMPLETED


async def test_not_applied_is_a_handled_failure_and_a_retry_may_run(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    payments.refuse = 1
    await world.run("turn-1", "charge 42")
    refused = await world.run("turn-2", "yes")
    [step] = refused.response.steps
    assert step.status == "failed" and step.reason is not None
    assert "did not go through" in step.reason
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None and stored.status is ReceiptStatus.FAILED
    await world.run("turn-3", "charge 42")
    done = await world.run("turn-4", "yes")
    assert done.response.text == "Charged 5 EUR for order 42."
    assert payments.calls == [KEY, KEY]


async def test_a_crash_between_prepare_and_the_call_leaves_an_uncertain_receipt(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")
    with crash_hook(raise_at(CrashPoint.EFFECT_PREPARED)), pytest.raises(SimulatedCrash):
        await world.run("turn-2", "", selection=accept(proposed))
    assert payments.calls == []
    # The client delivers the same turn again: the prepared receipt is found, the outcome is
    # unknown, and the turn commits "being verified" without calling the provider.
    retried = await world.run("turn-2", "", selection=accept(proposed))
    assert not retried.replayed
    assert "being verified" in retried.response.text
    assert payments.calls == []
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None and stored.status is ReceiptStatus.UNCERTAIN
    # The answer is committed, so the interaction is closed and a later "yes" runs nothing.
    assert retried.checkpoint.interaction is None
    later = await world.run("turn-3", "yes")
    assert later.response.kind == "clarification"
    assert payments.calls == []


@pytest.mark.parametrize("point", [CrashPoint.EFFECT_RETURNED, CrashPoint.RECEIPT_RECORDED])
async def test_a_crash_after_the_call_replays_or_fails_closed_on_retry(
    durability: DurabilityStore, point: CrashPoint
) -> None:
    world, payments = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")
    with crash_hook(raise_at(point)), pytest.raises(SimulatedCrash):
        await world.run("turn-2", "", selection=accept(proposed))
    assert payments.calls == [KEY]
    retried = await world.run("turn-2", "", selection=accept(proposed))
    assert payments.calls == [KEY]  # never a second call
    if point is CrashPoint.RECEIPT_RECORDED:
        # Completed before the crash: the retry replays the stored value.
        assert retried.response.text == "Charged 5 EUR for order 42."
        assert retried.checkpoint.receipts[-1].status is ReceiptStatus.COMPLETED
    else:
        # The value was never recorded: the outcome is unknown.
        assert "being verified" in retried.response.text


async def test_selection_for_a_closed_interaction_after_a_crash_is_still_checked(
    durability: DurabilityStore,
) -> None:
    world, _ = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")
    await world.run("turn-2", "", selection=accept(proposed))
    with pytest.raises(InvalidInputError) as info:
        await world.run("turn-3", "", selection=accept(proposed))
    assert info.value.code == ErrorCode.INTERACTION_NOT_ACTIVE


def test_provider_keys_carry_an_explicit_namespace() -> None:
    authority = EffectAuthority("payments.charge:order:42", "rcpt_1")
    a = provider_idempotency_key(authority, tenant="acme", thread="t1")
    assert a == provider_idempotency_key(authority, tenant="acme", thread="t1")
    assert a != provider_idempotency_key(authority, tenant="acme", thread="t2")
    assert a != provider_idempotency_key(authority, tenant="other", thread="t1")
    assert a != provider_idempotency_key(authority, tenant="acme", thread=None)
    # Not confusable by moving separators between parts.
    assert provider_idempotency_key(
        EffectAuthority("b", "r"), tenant="a/", thread="x"
    ) != provider_idempotency_key(EffectAuthority("/b", "r"), tenant="a", thread="x")
    assert a.startswith("ik-") and len(a) <= 64 and a.replace("-", "").isalnum()
    # The receipt id is not part of it: a retry of a failed receipt sends the same key.
    assert a == provider_idempotency_key(
        EffectAuthority("payments.charge:order:42", "rcpt_2"), tenant="acme", thread="t1"
    )
    with pytest.raises(InvalidInputError):
        provider_idempotency_key(authority, tenant=" ", thread="t1")


async def test_a_capability_swallowing_the_uncertainty_still_reports_it(
    durability: DurabilityStore,
) -> None:
    import contextlib
    from typing import Any

    from intention_kernel.contracts import EffectUncertainError
    from intention_kernel.kernel import Completed, define_capability

    from .writes import CHARGE, Charge, FaqAnswer, Payments

    async def optimistic(context: Any, charge: Charge) -> Completed:
        payments: Payments = context.ports["payments"]
        with contextlib.suppress(EffectUncertainError):
            await context.run_effect(
                "x", lambda authority: payments.charge(authority, charge.order_id, 1)
            )
        return Completed(output=FaqAnswer(answer="done"), text="All done!")

    cap = define_capability(
        id="payments.optimistic",
        version="1.0.0",
        description="Charge and hope.",
        input=Charge,
        output=FaqAnswer,
        effect="write",
        confirmation="required",
        execute=optimistic,
    )
    world, payments = payments_world(durability, [cap])
    assert CHARGE.id == "payments.charge"
    payments.lose_response = 1
    world.say(
        "hope", [{"capability": "payments.optimistic", "input": {"order_id": "1", "amount": 1}}]
    )
    proposed = await world.run("turn-1", "hope")
    result = await world.run("turn-2", "", selection=accept(proposed))
    assert "All done" not in result.response.text
    assert "being verified" in result.response.text
    assert [s.status for s in result.response.steps] == ["uncertain"]
