"""The write path the kernel already has: ``context.run_effect`` through ``scope.run_effect``."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from intention_kernel.contracts import DurabilityStore, EffectAuthority, ErrorCode, UsageError
from intention_kernel.kernel import Completed, Kernel, define_capability

from .support import FaqAnswer, TrackQuery, make_world, support_agent


class Ticket(BaseModel):
    subject: str


class Provider:
    def __init__(self) -> None:
        self.keys: list[str] = []

    async def create(self, authority: EffectAuthority, subject: str) -> dict[str, Any]:
        self.keys.append(authority.idempotency_key)
        return {"ticket": f"T-{len(self.keys)}", "subject": subject}


async def _open_ticket(context: Any, ticket: Ticket) -> Completed:
    provider: Provider = context.ports["provider"]
    effect = await context.run_effect(
        f"ticket:{ticket.subject}", lambda authority: provider.create(authority, ticket.subject)
    )
    return Completed(output=FaqAnswer(answer=effect.value["ticket"]), text="Ticket opened.")


TICKET = define_capability(
    id="tickets.open",
    version="1.0.0",
    description="Open a support ticket.",
    input=Ticket,
    output=FaqAnswer,
    effect="write",
    confirmation="capability",
    execute=_open_ticket,
)


async def test_write_goes_through_the_ledger_and_lands_in_the_checkpoint(
    durability: DurabilityStore,
) -> None:
    world = make_world(durability, agent=support_agent([TICKET]))
    provider = Provider()
    kernel = Kernel(
        durability=durability, model=world.gateway, ports={"shop": world.shop, "provider": provider}
    )
    agent = kernel.compile(support_agent([TICKET]))
    intent = [{"capability": "tickets.open", "input": {"subject": "broken"}}]
    world.say("open a ticket", intent)
    world.say("open it again", intent)
    first = await agent.run(thread_id="t1", turn_id="turn-1", text="open a ticket")
    [receipt] = first.checkpoint.receipts
    assert receipt.idempotency_key == "tickets.open:ticket:broken"
    assert receipt.status == "completed" and receipt.step_id == "step-1"
    assert first.response.evidence[0].receipt_id == receipt.id
    # The same business key in a later turn replays the stored value: one provider call.
    second = await agent.run(thread_id="t1", turn_id="turn-2", text="open it again")
    assert provider.keys == ["tickets.open:ticket:broken"]
    assert [r.id for r in second.checkpoint.receipts] == [receipt.id]


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
    with pytest.raises(UsageError) as info:
        await world.run("turn-1", "sneak")
    assert info.value.code == ErrorCode.EFFECT_NOT_ALLOWED
    assert await durability.load_checkpoint("t1") is None


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
        confirmation="capability",
        execute=lazy,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("fake", [{"capability": "tickets.fake", "input": {"subject": "x"}}])
    result = await world.run("turn-1", "fake")
    assert [s.status for s in result.response.steps] == ["failed"]


async def _value() -> None:
    return None
