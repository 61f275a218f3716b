"""The bounded tool loop: a model that asks to see its steps' results plans again within the
turn, under every rule of the first round (consent, the ledger, replay, the limits)."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import DurabilityStore
from intention_kernel.contracts.errors import ModelGatewayError
from intention_kernel.contracts.gateway import ModelRequest, ModelResponse
from intention_kernel.kernel import (
    Budget,
    Kernel,
    KernelLimits,
    RoundStarted,
    StepFinished,
    StepStarted,
    TurnCompleted,
)
from intention_kernel.testing import ScriptedModelGateway

from .tool_loop import AGENT, BALANCE, CHECK_AND_SEND, Bank, bank_desk, scripted
from .writes import accept


def _interprets(gateway: ScriptedModelGateway) -> list[ModelRequest]:
    return [c for c in gateway.calls if c.task == "interpret"]


async def test_the_model_sees_the_balance_and_the_write_it_plans_then_waits_for_consent(
    durability: DurabilityStore,
) -> None:
    gateway = ScriptedModelGateway({"interpret": scripted, "compose": scripted})
    desk = bank_desk(durability, gateway)

    held = await desk.agent.run(thread_id="t", turn_id="1", text=CHECK_AND_SEND)

    first, second = _interprets(gateway)
    assert "results" not in first.input
    assert isinstance(second.input, dict) and second.input["round"] == 2
    assert second.input["results"] == [
        {
            "step_id": "step-1",
            "capability_id": "bank.balance",
            "status": "completed",
            "output": {"result": 150},
            "text": None,
            "reason": None,
            "prompt": None,
            "evidence_id": held.response.evidence[0].id,
            "input": {"account": "ACC-1"},
        }
    ]
    assert desk.bank.calls == []  # the write planned in round 2 is held for consent
    interaction = held.checkpoint.interaction
    assert interaction is not None and interaction.kind == "confirmation"
    assert "50" in interaction.prompt and "ACC-2" in interaction.prompt
    assert [(s.step_id, s.capability_id, str(s.status)) for s in held.response.steps] == [
        ("step-1", "bank.balance", "completed"),
        ("step-2", "bank.transfer", "awaiting_confirmation"),
    ]
    assert [c.task for c in gateway.calls] == ["interpret", "interpret", "compose"]

    done = await desk.agent.run(thread_id="t", turn_id="2", text="", selection=accept(held))
    assert len(desk.bank.calls) == 1 and desk.bank.balances == {"ACC-1": 100, "ACC-2": 50}
    assert done.checkpoint.interaction is None

    calls = len(gateway.calls)
    again = await desk.agent.run(thread_id="t", turn_id="1", text=CHECK_AND_SEND)
    assert again.replayed and len(gateway.calls) == calls  # a replay runs nothing
    assert len(desk.bank.calls) == 1


async def test_a_balance_of_80_sends_nothing(durability: DurabilityStore) -> None:
    gateway = ScriptedModelGateway({"interpret": scripted, "compose": scripted})
    desk = bank_desk(durability, gateway, bank=Bank(balances={"ACC-1": 80, "ACC-2": 0}))

    result = await desk.agent.run(thread_id="t", turn_id="1", text=CHECK_AND_SEND)

    assert len(_interprets(gateway)) == 2
    assert result.checkpoint.interaction is None and result.checkpoint.agenda == []
    assert [s.capability_id for s in result.response.steps] == ["bank.balance"]
    assert desk.bank.calls == [] and desk.bank.balances["ACC-1"] == 80


def _endless(request: ModelRequest) -> JsonValue:
    """A model that never stops planning: one more balance read each round, always ``more``."""
    if request.task == "compose":
        return {"text": "Read it.", "citations": []}
    return {"intentions": [BALANCE], "more": True}


async def test_the_round_limit_holds_against_a_model_that_never_stops(
    durability: DurabilityStore,
) -> None:
    gateway = ScriptedModelGateway({"interpret": _endless, "compose": _endless})
    desk = bank_desk(durability, gateway, limits=KernelLimits(max_rounds=3))

    result = await desk.agent.run(thread_id="t", turn_id="1", text="keep reading")

    assert [c.task for c in gateway.calls] == ["interpret"] * 3 + ["compose"]
    assert [s.step_id for s in result.response.steps] == ["step-1", "step-2", "step-3"]
    assert "I stopped after 3 rounds of steps" in result.response.text
    types = [e.type for e in desk.events.events]
    assert types.count("round.started") == 2 and types.count("round.limited") == 1
    rounds = [e.data["round"] for e in desk.events.events if e.type == "plan.created"]
    assert rounds == [1, 2, 3]


async def test_the_step_limit_counts_every_round(durability: DurabilityStore) -> None:
    gateway = ScriptedModelGateway(
        {
            "interpret": lambda request: {"intentions": [BALANCE, BALANCE], "more": True},
            "compose": _endless,
        }
    )
    desk = bank_desk(durability, gateway, limits=KernelLimits(max_steps=3, max_rounds=5))

    result = await desk.agent.run(thread_id="t", turn_id="1", text="read twice, again")

    assert [s.step_id for s in result.response.steps] == ["step-1", "step-2", "step-3"]
    assert len(_interprets(gateway)) == 2  # round 2 had room for one step; then no room left
    assert "I stopped after 2 rounds of steps" in result.response.text


async def test_a_write_from_a_later_round_relies_on_earlier_facts_and_runs_once_across_retries(
    durability: DurabilityStore,
) -> None:
    """Round 2's transfer requires the balance fact round 1 produced: it is asked for consent
    at once (it does not wait for the fact). Accepted, it runs; composing then fails and the
    turn does not commit; delivered again, the ledger answers the transfer: one provider call."""
    down = {"left": 0}

    def compose(request: ModelRequest) -> JsonValue:
        if down["left"]:
            down["left"] -= 1
            raise ModelGatewayError("the provider is down")
        return scripted(request)

    gateway = ScriptedModelGateway({"interpret": scripted, "compose": compose})
    desk = bank_desk(durability, gateway)
    held = await desk.agent.run(thread_id="t", turn_id="1", text=CHECK_AND_SEND)
    [item] = held.checkpoint.agenda
    assert str(item.status) == "awaiting_confirmation"  # not waiting for the balance fact
    [fact] = [f for f in held.checkpoint.facts if f.type == "balance"]
    assert fact.value == 150

    down["left"] = 1
    with pytest.raises(ModelGatewayError):
        await desk.agent.run(thread_id="t", turn_id="2", text="", selection=accept(held))
    assert len(desk.bank.calls) == 1
    done = await desk.agent.run(thread_id="t", turn_id="2", text="", selection=accept(held))

    assert not done.replayed and len(desk.bank.calls) == 1
    assert desk.bank.balances == {"ACC-1": 100, "ACC-2": 50}


async def test_a_stream_shows_each_further_round(durability: DurabilityStore) -> None:
    gateway = ScriptedModelGateway({"interpret": scripted, "compose": scripted})
    desk = bank_desk(durability, gateway)

    items = [i async for i in desk.agent.stream(thread_id="t", turn_id="1", text=CHECK_AND_SEND)]

    shown = [i for i in items if isinstance(i, StepStarted | StepFinished | RoundStarted)]
    assert [type(i).__name__ for i in shown] == ["StepStarted", "StepFinished", "RoundStarted"]
    assert shown[2] == RoundStarted(2)
    assert isinstance(items[-1], TurnCompleted)


async def test_a_watcher_of_a_submitted_turn_sees_its_rounds(durability: DurabilityStore) -> None:
    gateway = ScriptedModelGateway({"interpret": scripted, "compose": scripted})
    desk = bank_desk(durability, gateway)
    await desk.agent.submit(thread_id="t", turn_id="1", text=CHECK_AND_SEND)
    worker = desk.agent.worker(claim_ttl=2.0, poll_interval=0.05)
    task = asyncio.create_task(worker.run())
    try:
        watched = [w.item async for w in desk.agent.watch(thread_id="t", turn_id="1")]
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    assert RoundStarted(2) in watched
    assert isinstance(watched[-1], TurnCompleted)


class Billed:
    """The scripted model, reporting 70 tokens a call (what a budget counts)."""

    provider = "openai"
    max_tokens = 100

    def __init__(self, inner: ScriptedModelGateway) -> None:
        self.inner = inner

    async def complete(self, request: ModelRequest) -> ModelResponse:
        answer = await self.inner.complete(request)
        return answer.model_copy(update={"usage": {"input_tokens": 50, "output_tokens": 20}})


async def test_a_budget_that_runs_out_between_rounds_ends_the_loop_with_what_ran(
    durability: DurabilityStore,
) -> None:
    gateway = ScriptedModelGateway({"interpret": scripted, "compose": scripted})
    bank = Bank()
    kernel = Kernel(
        durability=durability, model=Billed(gateway), deps=bank, budgets=[Budget(tokens=60)]
    )
    ended = await kernel.compile(AGENT).run(thread_id="t", turn_id="1", text=CHECK_AND_SEND)

    assert [c.task for c in gateway.calls] == ["interpret"]  # round 2 was refused
    assert ended.response.kind == "budget_exceeded"
    assert [(s.capability_id, str(s.status)) for s in ended.response.steps] == [
        ("bank.balance", "completed")
    ]
    assert ended.checkpoint.interaction is None and bank.calls == []
