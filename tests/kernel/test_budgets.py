"""Budgets and provider flow control in the kernel: a used-up budget makes no model call and
writes nothing; limits and prices are checked at compile; slots and cool-downs hold across
turns (memory and SQLite stores; the multi-process figures are in ``tests/faults``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import ErrorCode, ModelRequest, ModelResponse
from intention_kernel.contracts.errors import (
    ConfigurationError,
    InvalidInputError,
    ModelGatewayError,
)
from intention_kernel.contracts.flow import FlowCounters
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.kernel import Budget, Kernel, Limit, Price, ProviderWait, TurnCompleted
from intention_kernel.testing import EventCollector, MemoryDurability, ScriptedModelGateway

from .support import Shop, cite_all, support_agent

LOOKUP: list[JsonValue] = [{"capability": "orders.lookup", "input": {"order_id": "42"}}]


class Metered:
    """A provider that reports ``usage`` tokens per call and counts calls in flight."""

    provider = "openai"
    max_tokens = 100

    def __init__(self, usage: tuple[int, int] = (50, 20), delay: float = 0.0) -> None:
        self.usage = usage
        self.delay = delay
        self.calls = 0
        self.inside = 0
        self.most_inside = 0
        self.times: list[float] = []
        self.fail_next: ModelGatewayError | None = None
        self.inner = ScriptedModelGateway({"interpret": self._interpret, "compose": cite_all})

    @staticmethod
    def _interpret(request: ModelRequest) -> JsonValue:
        return {"intentions": LOOKUP, "answer": None, "reply": None}

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        self.times.append(asyncio.get_running_loop().time())
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        try:
            await asyncio.sleep(self.delay)
            answer = await self.inner.complete(request)
        finally:
            self.inside -= 1
        usage = {"input_tokens": self.usage[0], "output_tokens": self.usage[1]}
        return answer.model_copy(update={"usage": usage})


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "memory":
        durability: Any = MemoryDurability()
    else:
        durability = await SQLiteDurability.open(tmp_path / "budgets.db")
    try:
        yield durability
    finally:
        await durability.close()


def agent(store: Any, model: Metered, **kernel: Any) -> Any:
    wired = Kernel(durability=store, model=model, ports={"shop": Shop()}, **kernel)
    return wired.compile(support_agent())


async def test_a_used_up_budget_answers_in_the_kernel_s_words_with_no_model_call(
    store: Any,
) -> None:
    model = Metered(usage=(50, 20))
    # Each call reserves its prompt's bytes + an allowance + max_tokens, several thousand
    # tokens: a 1-token-left budget still admits one call, then refuses.
    events = EventCollector()
    compiled = agent(store, model, budgets=[Budget(tokens=140, name="daily")], sinks=[events])
    first = await compiled.run(thread_id="t1", turn_id="u1", text="where is 42")
    assert first.usage.model_calls == 2 and model.calls == 2
    calls = model.calls
    refused = await compiled.run(thread_id="t1", turn_id="u2", text="where is 42")
    assert refused.response.kind == "budget_exceeded"
    assert "the model budget for this is used up" in refused.response.text
    assert refused.response.steps == [] and refused.usage.model_calls == 0
    assert model.calls == calls  # refused before the call
    again = await compiled.run(thread_id="t1", turn_id="u2", text="where is 42")
    assert again.replayed and again.response == refused.response  # the turn's answer
    [event] = [e for e in events.events if e.type == "budget.exceeded"]
    ends = event.data["window_end"]  # the day's window
    assert event.data["budget"] == "daily" and isinstance(ends, str)
    assert f"used up until {ends[:10]} 00:00 UTC" in refused.response.text
    counters: FlowCounters = store.counters
    (usage,) = await counters.usage(budget="daily")
    assert (usage.tokens_used, usage.tokens_reserved, usage.calls) == (140, 0, 2)
    await counters.set_limit("daily", tokens=1000, actor="ops", note="more for today")
    later = await compiled.run(thread_id="t1", turn_id="u3", text="where is 42")
    assert later.response.kind != "budget_exceeded" and model.calls == calls + 2


async def test_a_budget_used_up_mid_turn_keeps_what_ran_and_makes_no_further_call(
    store: Any,
) -> None:
    model = Metered(usage=(50, 20))
    compiled = agent(store, model, budgets=[Budget(tokens=60, scope="thread")])
    ended = await compiled.run(thread_id="t1", turn_id="u1", text="where is 42")
    assert model.calls == 1  # interpreted (70 tokens used); compose was refused
    assert ended.response.kind == "budget_exceeded"
    [step] = ended.response.steps
    assert (step.capability_id, str(step.status)) == ("orders.lookup", "completed")
    assert ended.response.text.splitlines()[-1].startswith("I stopped here: the model budget")
    assert ended.checkpoint.revision == 1  # committed, with the step's facts
    other = await compiled.run(thread_id="t2", turn_id="u1", text="where is 42")
    assert other.response.kind == "budget_exceeded"  # its own line, its own first call
    assert model.calls == 2
    used = {u.key: u.tokens_used for u in await store.counters.usage()}
    assert used == {"t1": 70, "t2": 70}


async def test_tenant_keys_and_a_key_callable_that_raises(store: Any) -> None:
    model = Metered()

    def tenant(context: Any) -> str:
        return str(context.host_context["tenant"])

    compiled = agent(store, model, budgets=[Budget(tokens=10_000, scope="tenant", key=tenant)])
    await compiled.run(thread_id="t1", turn_id="u1", text="hi", host_context={"tenant": "acme"})
    with pytest.raises(InvalidInputError) as caught:
        await compiled.run(thread_id="t2", turn_id="u1", text="hi")
    assert caught.value.code is ErrorCode.BUDGET_KEY_FAILED
    assert model.calls == 2 and await store.get_turn("t2", "u1") is None
    listed = await store.counters.usage()
    assert [(u.key, u.calls) for u in listed] == [("acme", 2)]


async def test_bad_budgets_limits_and_prices_are_refused_before_any_turn(store: Any) -> None:
    model = Metered()
    for bad in (
        {"tokens": 0},
        {"tokens": -5},
        {"cost": -1.0},
        {},
        {"tokens": 5, "per": "week"},
        {"tokens": 5, "per": timedelta(milliseconds=10)},
        {"tokens": 5, "scope": "tenant"},
    ):
        with pytest.raises(ConfigurationError):
            Budget(**bad)
    for bad_limit in ({"concurrent": 0}, {"per_minute": -1}, {"lease": 0}):
        with pytest.raises(ConfigurationError):
            Limit(**bad_limit)
    with pytest.raises(ConfigurationError) as caught:
        agent(store, model, budgets=[Budget(cost=5.0)], prices={"other": Price(1, 2)})
    assert "prices" in str(caught.value.context["problems"])
    with pytest.raises(ConfigurationError):
        agent(store, model, provider_limits={"nobody": Limit(concurrent=1)})
    with pytest.raises(ConfigurationError):
        agent(store, model, budgets=[Budget(tokens=5), Budget(tokens=6)])  # one name
    assert await store.counters.usage() == []


async def test_a_cost_budget_is_priced_from_the_table(store: Any) -> None:
    model = Metered(usage=(1_000_000, 0))
    prices = {"Metered": Price(input=2.0, output=8.0)}
    compiled = agent(store, model, budgets=[Budget(cost=3.0, name="spend")], prices=prices)
    await compiled.run(thread_id="t1", turn_id="u1", text="where is 42")
    (usage,) = await store.counters.usage(budget="spend")
    assert usage.cost_used == pytest.approx(4.0) and usage.exhausted
    refused = await compiled.run(thread_id="t1", turn_id="u2", text="where is 42")
    assert refused.response.kind == "budget_exceeded"


async def test_a_provider_limit_caps_calls_in_flight_and_a_waiting_turn_says_so(
    store: Any,
) -> None:
    model = Metered(delay=0.05)
    compiled = agent(store, model, provider_limits={"openai": Limit(concurrent=1)})
    seen: list[Any] = []

    async def streamed(thread_id: str) -> None:
        async for item in compiled.stream(thread_id=thread_id, turn_id="u1", text="x"):
            seen.append(item)

    await asyncio.gather(*(streamed(f"t{n}") for n in range(3)))
    assert model.most_inside == 1 and model.calls == 6
    assert any(isinstance(i, ProviderWait) and i.reason == "busy" for i in seen)
    assert sum(isinstance(i, TurnCompleted) for i in seen) == 3


async def test_a_rate_limited_answer_cools_the_provider_down_for_every_turn(store: Any) -> None:
    model = Metered()
    compiled = agent(store, model, provider_limits={"openai": Limit()})
    model.fail_next = ModelGatewayError(
        "rate limited", context={"kind": "rate_limit", "status": 429, "retry_after": 0.4}
    )
    with pytest.raises(ModelGatewayError):
        await compiled.run(thread_id="t1", turn_id="u1", text="x")
    refused_at = model.times[-1]
    await compiled.run(thread_id="t2", turn_id="u1", text="x")
    assert model.times[1] - refused_at >= 0.4
    (usage,) = [p for p in await store.counters.providers() if p.provider == "openai"]
    assert usage.cooling_until is None and usage.in_use == 0
