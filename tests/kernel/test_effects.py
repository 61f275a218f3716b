"""Writes through ``context.run_effect``: the ledger, the checkpoint, and who may call it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from intention_kernel.contracts import DurabilityStore, ErrorCode
from intention_kernel.kernel import Completed, define_capability

from .support import FaqAnswer, TrackQuery, make_world, support_agent
from .writes import accept, payments_world


class Ticket(BaseModel):
    subject: str


async def test_write_goes_through_the_ledger_and_lands_in_the_checkpoint(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    proposed = await world.run("turn-1", "charge 42")
    first = await world.run("turn-2", "", selection=accept(proposed))
    [receipt] = first.checkpoint.receipts
    assert receipt.idempotency_key == "payments.charge:order:42"
    assert receipt.status == "completed" and receipt.step_id == "resume-1"
    assert first.response.evidence[0].receipt_id == receipt.id
    # The same business key in a later turn replays the stored value: one provider call.
    again = await world.run("turn-3", "charge 42")
    second = await world.run("turn-4", "yes")
    assert [s.status for s in second.response.steps] == ["completed"]
    assert payments.calls == ["payments.charge:order:42"]
    assert [r.id for r in second.checkpoint.receipts] == [receipt.id]
    assert again.checkpoint.interaction is not None


async def test_reads_may_not_run_effects(durability: DurabilityStore) -> None:
    async def sneaky(context: Any, query: TrackQuery) -> Completed:
        await context.run_effect("x", lambda authority: _value())
        return Completed(output=FaqAnswer(answer="-"))

    cap = define_capability(
        id="sneaky.read",
        version="1.0.0",
        description="A read that tries to write.",
        input=TrackQuery,
        output=FaqAnswer,
        execute=sneaky,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("sneak", [{"capability": "sneaky.read", "input": {}}])
    result = await world.run("turn-1", "sneak")
    [step] = result.response.steps
    assert step.status == "failed" and step.retryable is False
    assert result.checkpoint.receipts == []
    outbox = await durability.read_outbox(thread_id="t1")
    [failed] = [s.event for s in outbox if s.event.type == "step.failed"]
    assert failed.data["error"] == {
        "type": "intention_kernel.contracts.errors.UsageError",
        "retryable": False,
        "code": str(ErrorCode.EFFECT_NOT_ALLOWED),
    }


async def test_a_write_that_completes_without_a_receipt_is_a_failed_step(
    durability: DurabilityStore,
) -> None:
    async def lazy(context: Any, ticket: Ticket) -> Completed:
        return Completed(output=FaqAnswer(answer="done, honestly"))

    cap = define_capability(
        id="tickets.fake",
        version="1.0.0",
        description="Pretend to open a ticket.",
        input=Ticket,
        output=FaqAnswer,
        effect="write",
        confirmation="required",
        execute=lazy,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("fake", [{"capability": "tickets.fake", "input": {"subject": "x"}}])
    proposed = await world.run("turn-1", "fake")
    result = await world.run("turn-2", "", selection=accept(proposed))
    assert [s.status for s in result.response.steps] == ["failed"]
    assert "could not complete" in result.response.text.lower() or result.response.kind == "answer"
    assert result.checkpoint.receipts == []


async def test_a_write_output_failing_its_schema_is_refused(durability: DurabilityStore) -> None:
    async def wrong(context: Any, ticket: Ticket) -> Completed:
        await context.run_effect("t", lambda authority: _value())
        return Completed(output={"not_the_answer_field": 1})

    cap = define_capability(
        id="tickets.wrong",
        version="1.0.0",
        description="Open a ticket badly.",
        input=Ticket,
        output=FaqAnswer,
        effect="write",
        confirmation="required",
        execute=wrong,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("wrong", [{"capability": "tickets.wrong", "input": {"subject": "x"}}])
    proposed = await world.run("turn-1", "wrong")
    result = await world.run("turn-2", "", selection=accept(proposed))
    [step] = result.response.steps
    assert step.status == "failed"
    assert step.reason == "the capability's output did not match its declared schema"
    assert result.checkpoint.facts == []


async def _value() -> None:
    return None
