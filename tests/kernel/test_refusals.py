"""A provider that declines (a refusal or a content filter) is answered safely without a repair;
a malformed answer still gets its one repair; no model call happens while a write is under way.
"""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue

from intention_kernel.contracts import (
    DurabilityStore,
    EffectAuthority,
    ModelRefusal,
    ModelRequest,
    ModelResponse,
    ReceiptStatus,
)
from intention_kernel.kernel import Kernel, StepStatus
from intention_kernel.kernel._pipeline.plan import REFUSED

from .support import make_world, support_agent
from .writes import CHARGE, REFUND, Payments, accept, payments_world

REFUSAL = ModelResponse(
    finish_reason="refusal", refusal=ModelRefusal(kind="refusal", message="I won't do that.")
)
FILTERED = ModelResponse(finish_reason="content_filter")
LOOKUP = [{"capability": "orders.lookup", "input": {"order_id": "42"}}]


async def test_a_refused_interpretation_is_answered_without_a_repair(
    durability: DurabilityStore,
) -> None:
    world = make_world(durability, script={"interpret": REFUSAL, "repair": {"intentions": []}})
    result = await world.run("turn-1", "where is order 42?")
    assert world.gateway.count("repair") == 0
    assert [c.task for c in world.gateway.calls] == ["interpret"]
    assert result.response.kind == "clarification"
    assert result.response.text == REFUSED
    assert "I won't do that." not in result.response.text
    assert world.shop.total() == 0
    [completed] = world.collector.of_type("interpretation.completed")
    assert completed.data["refused"] == "refusal"


async def test_a_content_filter_stop_is_a_refusal_too(durability: DurabilityStore) -> None:
    world = make_world(durability, script={"interpret": FILTERED})
    result = await world.run("turn-1", "where is order 42?")
    assert [c.task for c in world.gateway.calls] == ["interpret"]
    assert result.response.text == REFUSED
    [done] = world.collector.of_type("model.completed")
    assert done.data["refusal"] == "content_filter"
    assert done.data["finish_reason"] == "content_filter"


async def test_a_refused_repair_ends_the_repair(durability: DurabilityStore) -> None:
    broken: JsonValue = {"intentions": [{"capability": "orders.lookup", "input": {}}]}
    world = make_world(durability, script={"interpret": broken, "repair": REFUSAL})
    result = await world.run("turn-1", "where is order 42?")
    assert [c.task for c in world.gateway.calls] == ["interpret", "repair"]
    assert result.response.text == REFUSED
    assert world.shop.total() == 0


async def test_a_refused_composition_falls_back_at_once(durability: DurabilityStore) -> None:
    world = make_world(durability, script={"compose": REFUSAL})
    world.say("where is order 42?", LOOKUP)
    result = await world.run("turn-1", "where is order 42?")
    assert world.gateway.count("compose") == 1  # not asked again: it would decline again
    assert result.response.kind == "fallback"
    assert result.response.text == "Order 42 has shipped."
    assert result.response.steps[0].status == StepStatus.COMPLETED


async def test_a_malformed_or_cut_off_answer_still_gets_one_repair(
    durability: DurabilityStore,
) -> None:
    cut_off = ModelResponse(output=None, finish_reason="length")
    world = make_world(durability, script={"interpret": cut_off, "repair": {"intentions": LOOKUP}})
    result = await world.run("turn-1", "where is order 42?")
    assert [c.task for c in world.gateway.calls] == ["interpret", "repair", "compose"]
    assert result.response.text == "Order 42 has shipped."


class Watching:
    """Wraps the scripted gateway: records, at each model call, whether a write was under way
    (its operation running) and the thread's receipts still ``prepared`` in the ledger."""

    def __init__(self, inner: Any, store: DurabilityStore, payments: Payments) -> None:
        self.inner = inner
        self.store = store
        self.payments = payments
        self.during_write: list[str] = []
        self.prepared: list[str] = []
        self.writing = False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self.writing:
            self.during_write.append(request.task)
        held = await self.store.list_receipts(status=ReceiptStatus.PREPARED, thread_id="t1")
        self.prepared.extend(f"{request.task}:{r.idempotency_key}" for r in held)
        response: ModelResponse = await self.inner.complete(request)
        return response


async def test_no_model_call_happens_while_a_receipt_is_prepared(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    watch = Watching(world.gateway, durability, payments)
    original = payments.charge

    async def charge(authority: EffectAuthority, order_id: str, amount: int) -> JsonValue:
        # Inside run_effect: the receipt is prepared in the ledger until this returns.
        watch.writing = True
        try:
            [receipt] = await durability.list_receipts(
                status=ReceiptStatus.PREPARED, thread_id="t1"
            )
            assert receipt.idempotency_key == authority.idempotency_key
            return await original(authority, order_id, amount)
        finally:
            watch.writing = False

    payments.charge = charge  # type: ignore[method-assign]
    kernel = Kernel(durability=durability, model=watch, ports=world.kernel.ports)
    world.agent = kernel.compile(support_agent([CHARGE, REFUND]))
    held = await world.run("turn-1", "charge 42")
    assert held.checkpoint.interaction is not None
    done = await world.run("turn-2", "", selection=accept(held))
    assert payments.calls and done.response.steps[0].status == StepStatus.COMPLETED
    assert world.gateway.count("compose") >= 1  # the model words the answer after the write
    assert watch.during_write == []
    assert watch.prepared == []
