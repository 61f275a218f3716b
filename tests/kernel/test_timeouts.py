"""A step that stops while a write is under way tells the user what the ledger knows.

A step timeout (``KernelLimits.step_timeout``), a capability's own timeout around
``context.run_effect`` or a capability that swallows an error from it must never turn a write
that went through, or whose outcome is unknown, into "failed, please try again": the customer
would be charged and asked to pay again. The kernel reads the ledger's receipt when the step
ends and answers from it:

- ``uncertain`` (cancelled during the provider call) or ``prepared`` (interrupted): the step is
  ``uncertain``, "being verified", with an ``effect.uncertain`` audit event for operators;
- ``completed`` (only the step's own finish was late): the step is ``applied``, "it went
  through, but I could not finish in time; ask again to see the result ...";
- ``failed`` or nothing (stopped before the provider was called): the step is ``failed``,
  "this took too long; please try again".

Every test runs on each adapter of ``DURABILITY_FACTORIES`` and is bounded to a few seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import (
    DurabilityStore,
    EffectAuthority,
    EffectIdentity,
    EffectReceipt,
    LeaseLostError,
    ReceiptStatus,
    TurnTimeoutError,
)
from intention_kernel.kernel import (
    CapabilityContext,
    Completed,
    Failed,
    KernelLimits,
    TurnResult,
    define_capability,
)
from intention_kernel.testing.conformance import turn_storage

from .support import World, make_world, support_agent
from .writes import CHARGE, CHARGE_42, REFUND, Charge, Payments, Receipt, accept

KEY = "payments.charge:order:42"
STEP = 0.3
"""The step timeout of these tests (seconds)."""
HANG = 5.0
"""How long a hanging provider takes to answer: always cut short by a timeout."""
SLOW = 1.0
"""How long a slow ledger write takes (the store may finish it although the step timed out)."""
VERIFYING = "the outcome is being verified"
TOO_LONG = "this took too long; please try again"
WENT_THROUGH = (
    "it went through, but I could not finish in time; "
    "ask again to see the result (it will not be done twice)"
)


@dataclass
class SlowPayments(Payments):
    """Applies the charge, then takes ``hang`` seconds to answer (the response is late)."""

    hang: float = 0.0

    async def charge(self, authority: EffectAuthority, order_id: str, amount: int) -> JsonValue:
        value = await super().charge(authority, order_id, amount)
        if self.hang:
            await asyncio.sleep(self.hang)
        return value


def timeout_world(
    durability: DurabilityStore, extra: list[Any] | None = None, *, step_timeout: float = STEP
) -> tuple[World, SlowPayments]:
    payments = SlowPayments()
    world = make_world(
        durability,
        agent=support_agent([CHARGE, REFUND, *(extra or [])]),
        ports={"payments": payments},
        limits=KernelLimits(step_timeout=step_timeout),
    )
    world.say("charge 42", CHARGE_42)
    world.say("yes", [], answer="yes")
    return world, payments


async def outbox_types(durability: DurabilityStore, turn_id: str) -> list[str]:
    return [e.event.type for e in await durability.read_outbox(thread_id="t1", turn_id=turn_id)]


async def assert_uncertain(durability: DurabilityStore, world: World, result: TurnResult) -> None:
    """The step is ``uncertain``, kernel-worded, with the ledger's receipt and its audit event."""
    text = result.response.text
    assert VERIFYING in text and "try again" not in text and "Charged" not in text
    assert result.response.kind == "fallback"
    [step] = result.response.steps
    assert step.status == "uncertain"
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None
    assert stored.status in (ReceiptStatus.UNCERTAIN, ReceiptStatus.PREPARED)
    [copy] = result.checkpoint.receipts
    assert copy.status is ReceiptStatus.UNCERTAIN and copy.id == stored.id
    outbox = await durability.read_outbox(thread_id="t1", turn_id=result.turn_id)
    [audit] = [e.event for e in outbox if e.event.type == "effect.uncertain"]
    assert audit.data["receipt_id"] == stored.id and audit.data["idempotency_key"] == KEY
    assert "effect.uncertain" in world.collector.types()


async def assert_not_charged_twice(world: World, payments: SlowPayments, answer: str) -> None:
    """Asking for the same charge again later calls the provider no second time."""
    payments.hang = 0.0
    await world.run("turn-3", "charge 42")
    again = await world.run("turn-4", "yes")
    assert answer in again.response.text
    assert payments.calls == [KEY]
    assert len(payments.charges) == 1


def slow_completion(
    monkeypatch: pytest.MonkeyPatch, durability: DurabilityStore, delay: float = SLOW
) -> asyncio.Event:
    """The store records ``completed`` durably, then takes ``delay`` to acknowledge it (a slow
    fsync or network round trip). Returns an event set once that write has ended."""
    store: Any = durability
    original = turn_storage(store).finish_effect
    ended = asyncio.Event()

    async def finish(lease: Any, receipt: EffectReceipt, value_json: str | None) -> None:
        await original(lease, receipt, value_json)
        if receipt.status is ReceiptStatus.COMPLETED:
            try:
                await asyncio.sleep(delay)
            finally:
                ended.set()

    monkeypatch.setattr(turn_storage(store), "finish_effect", finish)
    return ended


def slow_begin(
    monkeypatch: pytest.MonkeyPatch,
    durability: DurabilityStore,
    *,
    before: float = 0.0,
    after: float = 0.0,
) -> None:
    """The first effect start of the test waits ``before`` writing ``prepared`` and/or ``after``
    it (so a timeout stops it before the provider is called)."""
    store: Any = durability
    original = turn_storage(store).begin_effect
    slowed: list[str] = []

    async def begin(lease: Any, turn_id: str, identity: EffectIdentity, *more: Any) -> Any:
        first = not slowed
        slowed.append(identity.idempotency_key)
        if first and before:
            await asyncio.sleep(before)
        start = await original(lease, turn_id, identity, *more)
        if first and after:
            await asyncio.sleep(after)
        return start

    monkeypatch.setattr(turn_storage(store), "begin_effect", begin)


Then = Callable[[CapabilityContext, Charge], Awaitable[Any]]


def write_capability(id: str, execute: Then) -> Any:
    return define_capability(
        id=id,
        version="1.0.0",
        description="Charge the customer for an order.",
        input=Charge,
        output=Receipt,
        effect="write",
        confirmation="required",
        execute=execute,
    )


async def _charge_once(context: CapabilityContext, charge: Charge) -> Any:
    payments: SlowPayments = context.ports["payments"]
    return await context.run_effect(
        f"order:{charge.order_id}",
        lambda authority: payments.charge(authority, charge.order_id, charge.amount),
    )


# ------------------------------------------------------------------ the step's own timeout


async def test_a_step_timeout_during_the_provider_call_is_uncertain_not_try_again(
    durability: DurabilityStore,
) -> None:
    world, payments = timeout_world(durability)
    payments.hang = HANG  # the charge is applied; the answer comes too late
    proposed = await world.run("turn-1", "charge 42")
    result = await world.run("turn-2", "", selection=accept(proposed))
    await assert_uncertain(durability, world, result)
    assert result.response.steps[0].reason is not None
    assert VERIFYING in result.response.steps[0].reason
    assert payments.calls == [KEY] and len(payments.charges) == 1  # the customer was charged
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None and stored.status is ReceiptStatus.UNCERTAIN
    types = await outbox_types(durability, "turn-2")
    assert "step.uncertain" in types and "step.failed" not in types
    # The same turn delivered again replays the committed answer.
    replay = await world.run("turn-2", "", selection=accept(proposed))
    assert replay.replayed and replay.response.text == result.response.text
    await assert_not_charged_twice(world, payments, VERIFYING)


async def test_a_step_timeout_while_completion_is_recorded_says_it_went_through(
    durability: DurabilityStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, payments = timeout_world(durability)
    ended = slow_completion(monkeypatch, durability)
    proposed = await world.run("turn-1", "charge 42")
    result = await world.run("turn-2", "", selection=accept(proposed))
    await asyncio.wait_for(ended.wait(), 5.0)
    text = result.response.text
    assert WENT_THROUGH in text and "took too long" not in text
    assert "could not complete" not in text.lower() and VERIFYING not in text
    assert result.response.kind == "fallback"
    [step] = result.response.steps
    assert step.status == "applied" and step.reason == WENT_THROUGH
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None and stored.status is ReceiptStatus.COMPLETED
    [copy] = result.checkpoint.receipts
    assert copy.status is ReceiptStatus.COMPLETED and copy.id == stored.id
    assert copy.value == {"charge_id": "ch-1", "amount": 5}
    types = await outbox_types(durability, "turn-2")
    assert "step.applied" in types and "effect.uncertain" not in types
    # "Ask again to see the result": the stored value is replayed, nothing is charged twice.
    await assert_not_charged_twice(world, payments, "Charged 5 EUR for order 42.")


async def test_a_step_timeout_after_the_write_returned_says_it_went_through(
    durability: DurabilityStore,
) -> None:
    async def then_slow(context: CapabilityContext, charge: Charge) -> Completed:
        effect = await _charge_once(context, charge)
        await asyncio.sleep(HANG)  # e.g. a confirmation e-mail that hangs
        return Completed(output=Receipt.model_validate(effect.value), text="Charged.")

    world, payments = timeout_world(durability, [write_capability("payments.slow", then_slow)])
    world.say("slow", [{"capability": "payments.slow", "input": {"order_id": "42", "amount": 5}}])
    proposed = await world.run("turn-1", "slow")
    result = await world.run("turn-2", "", selection=accept(proposed))
    [step] = result.response.steps
    assert step.status == "applied" and step.reason == WENT_THROUGH
    assert "took too long" not in result.response.text
    [copy] = result.checkpoint.receipts
    assert copy.status is ReceiptStatus.COMPLETED
    assert copy.idempotency_key == "payments.slow:order:42"
    assert payments.calls == ["payments.slow:order:42"]


async def test_a_step_timeout_before_anything_was_prepared_is_a_plain_failure(
    durability: DurabilityStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, payments = timeout_world(durability)
    slow_begin(monkeypatch, durability, before=SLOW)
    proposed = await world.run("turn-1", "charge 42")
    result = await world.run("turn-2", "", selection=accept(proposed))
    [step] = result.response.steps
    assert step.status == "failed" and step.reason == TOO_LONG
    assert payments.calls == []
    stored = await durability.get_receipt("t1", KEY)
    # Nothing, or ``failed`` when the store finished the start and then recorded the cancel.
    assert stored is None or stored.status is ReceiptStatus.FAILED
    assert ReceiptStatus.UNCERTAIN not in [r.status for r in result.checkpoint.receipts]
    assert "effect.uncertain" not in await outbox_types(durability, "turn-2")
    # "Try again" was true: the retry charges once.
    await world.run("turn-3", "charge 42")
    done = await world.run("turn-4", "yes")
    assert done.response.text == "Charged 5 EUR for order 42."
    assert payments.calls == [KEY]


async def test_a_step_stopped_after_prepare_before_the_call_answers_what_the_ledger_knows(
    durability: DurabilityStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, payments = timeout_world(durability)
    slow_begin(monkeypatch, durability, after=SLOW)
    proposed = await world.run("turn-1", "charge 42")
    result = await world.run("turn-2", "", selection=accept(proposed))
    assert payments.calls == []
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None
    [step] = result.response.steps
    if stored.status is ReceiptStatus.FAILED:
        # The store recorded that the provider was never called: "try again" is true.
        assert step.status == "failed" and step.reason == TOO_LONG
        assert "effect.uncertain" not in await outbox_types(durability, "turn-2")
    else:
        # ``prepared`` after an interruption: nobody knows whether the call went out.
        assert stored.status in (ReceiptStatus.PREPARED, ReceiptStatus.UNCERTAIN)
        await assert_uncertain(durability, world, result)
        await world.run("turn-3", "charge 42")
        again = await world.run("turn-4", "yes")
        assert VERIFYING in again.response.text and payments.calls == []


async def test_a_turn_timeout_during_the_call_is_honest_and_redelivery_tells_the_truth(
    durability: DurabilityStore,
) -> None:
    world, payments = timeout_world(durability, step_timeout=30.0)
    payments.hang = HANG
    proposed = await world.run("turn-1", "charge 42")
    with pytest.raises(TurnTimeoutError) as info:
        await world.run("turn-2", "", selection=accept(proposed), timeout=STEP)
    assert "may have committed" in info.value.message
    assert "deliver the same turn id again" in info.value.message
    assert "nothing was committed" not in info.value.message
    # What the message asks for: the same turn id again. It was not committed, so it runs,
    # and the write's unknown outcome is answered honestly; the provider is not called again.
    payments.hang = 0.0
    again = await world.run("turn-2", "", selection=accept(proposed))
    assert not again.replayed
    await assert_uncertain(durability, world, again)
    assert payments.calls == [KEY]


def test_error_messages_state_only_what_is_known() -> None:
    lost = LeaseLostError().message
    assert "nothing was written" not in lost
    assert "did not commit" in lost and "deliver the same turn id again" in lost
    timeout = TurnTimeoutError().message
    assert "nothing was committed" not in timeout and "may have committed" in timeout


# ------------------------------------------------------------------ the capability's own handling


@pytest.mark.parametrize("claims", ["failed", "completed"])
async def test_a_capability_timeout_around_run_effect_cannot_hide_an_unknown_outcome(
    durability: DurabilityStore, claims: str
) -> None:
    async def impatient(context: CapabilityContext, charge: Charge) -> Completed | Failed:
        try:
            async with asyncio.timeout(STEP):
                await _charge_once(context, charge)
        except TimeoutError:
            if claims == "failed":
                return Failed("The payment timed out; please try again.")
            return Completed(output=Receipt(charge_id="?", amount=charge.amount), text="All done!")
        return Completed(output=Receipt(charge_id="-", amount=charge.amount), text="Charged.")

    cap = write_capability("payments.charge", impatient)
    payments = SlowPayments(hang=HANG)
    world = make_world(
        durability,
        agent=support_agent([cap]),
        ports={"payments": payments},
        limits=KernelLimits(step_timeout=10.0),
    )
    world.say("charge 42", CHARGE_42)
    world.say("yes", [], answer="yes")
    proposed = await world.run("turn-1", "charge 42")
    result = await world.run("turn-2", "", selection=accept(proposed))
    assert "All done" not in result.response.text and "timed out" not in result.response.text
    await assert_uncertain(durability, world, result)
    assert payments.calls == [KEY]


async def test_a_capability_timeout_after_the_write_landed_says_it_went_through(
    durability: DurabilityStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def impatient(context: CapabilityContext, charge: Charge) -> Completed | Failed:
        try:
            async with asyncio.timeout(STEP):
                await _charge_once(context, charge)
        except TimeoutError:
            return Failed("The payment timed out; please try again.")
        return Completed(output=Receipt(charge_id="-", amount=charge.amount), text="Charged.")

    cap = write_capability("payments.charge", impatient)
    payments = SlowPayments()
    world = make_world(
        durability,
        agent=support_agent([cap]),
        ports={"payments": payments},
        limits=KernelLimits(step_timeout=10.0),
    )
    world.say("charge 42", CHARGE_42)
    ended = slow_completion(monkeypatch, durability)
    proposed = await world.run("turn-1", "charge 42")
    result = await world.run("turn-2", "", selection=accept(proposed))
    await asyncio.wait_for(ended.wait(), 5.0)
    assert "timed out" not in result.response.text and WENT_THROUGH in result.response.text
    [step] = result.response.steps
    assert step.status == "applied"
    [copy] = result.checkpoint.receipts
    assert copy.status is ReceiptStatus.COMPLETED
    assert payments.calls == [KEY]


async def test_a_capability_swallowing_a_store_error_after_the_call_is_uncertain(
    durability: DurabilityStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store: Any = durability
    original = turn_storage(store).finish_effect

    async def failing(lease: Any, receipt: EffectReceipt, value_json: str | None) -> None:
        if receipt.status is ReceiptStatus.COMPLETED:
            raise OSError("the disk went away")  # the charge is applied but not recorded
        await original(lease, receipt, value_json)

    async def careless(context: CapabilityContext, charge: Charge) -> Failed:
        try:
            await _charge_once(context, charge)
        except Exception:
            return Failed("Something went wrong; please try again.")
        return Failed("unreachable")

    cap = write_capability("payments.charge", careless)
    payments = SlowPayments()
    world = make_world(durability, agent=support_agent([cap]), ports={"payments": payments})
    world.say("charge 42", CHARGE_42)
    proposed = await world.run("turn-1", "charge 42")
    monkeypatch.setattr(turn_storage(store), "finish_effect", failing)
    result = await world.run("turn-2", "", selection=accept(proposed))
    await assert_uncertain(durability, world, result)
    assert payments.calls == [KEY]
    # The ledger still says ``prepared`` (nothing could record the end); the checkpoint's copy
    # is ``uncertain`` and a later attempt is refused as in doubt, never charged again.
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None and stored.status is ReceiptStatus.PREPARED
    monkeypatch.setattr(turn_storage(store), "finish_effect", original)
    asked = await world.run("turn-3", "charge 42")
    again = await world.run("turn-4", "", selection=accept(asked))
    assert VERIFYING in again.response.text
    assert payments.calls == [KEY]


async def test_an_unrelated_failure_after_a_clean_write_is_left_to_the_capability(
    durability: DurabilityStore,
) -> None:
    """No interruption, no timeout: the capability's own answer stands, no ledger read."""

    async def picky(context: CapabilityContext, charge: Charge) -> Failed:
        await _charge_once(context, charge)
        return Failed("Charged, but the receipt printer is out of paper.")

    cap = write_capability("payments.charge", picky)
    world = make_world(durability, agent=support_agent([cap]), ports={"payments": SlowPayments()})
    world.say("charge 42", CHARGE_42)
    proposed = await world.run("turn-1", "charge 42")
    result = await world.run("turn-2", "", selection=accept(proposed))
    [step] = result.response.steps
    assert step.status == "failed" and step.reason is not None and "printer" in step.reason
    assert [r.status for r in result.checkpoint.receipts] == [ReceiptStatus.COMPLETED]


async def test_a_scope_without_the_receipt_read_fails_closed(durability: DurabilityStore) -> None:
    """An adapter written before ``TurnScope.receipts``: the kernel cannot ask the ledger, so an
    interrupted write is reported as in doubt, never as "please try again"."""
    from intention_kernel.kernel import Kernel

    from .test_reconciled_receipts import _OldDurability

    world, payments = timeout_world(durability)
    payments.hang = HANG
    kernel = Kernel(
        durability=_OldDurability(durability),
        model=world.gateway,
        ports={"payments": payments, "shop": world.shop},
        limits=KernelLimits(step_timeout=STEP),
    )
    agent = kernel.compile(support_agent([CHARGE, REFUND]))
    proposed = await agent.run(thread_id="t1", turn_id="turn-1", text="charge 42")
    result = await agent.run(thread_id="t1", turn_id="turn-2", text="", selection=accept(proposed))
    assert [s.status for s in result.response.steps] == ["uncertain"]
    assert VERIFYING in result.response.text and "try again" not in result.response.text
    [copy] = result.checkpoint.receipts
    assert copy.status is ReceiptStatus.UNCERTAIN and copy.idempotency_key == KEY
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None and stored.status is ReceiptStatus.UNCERTAIN
