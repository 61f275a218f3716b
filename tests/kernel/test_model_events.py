"""Model events (``model.invoked`` / ``model.completed``), redacted like the others, and the
turn's usage; a replay costs zero tokens."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from intention_kernel.contracts import (
    DurabilityStore,
    EventCategory,
    KernelEvent,
    ModelRequest,
    ModelResponse,
)
from intention_kernel.kernel import TurnUsage

from .support import World, cite_all, make_world

LOOKUP = [{"capability": "orders.lookup", "input": {"order_id": "42"}}]


class Ticking:
    """A clock that moves 250 ms each time it is read."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=250)
        return self.now


def priced(answer: Any, tokens: tuple[int, int]) -> Any:
    """A scripted answer that reports token usage, as a provider does."""

    def respond(request: ModelRequest) -> ModelResponse:
        output = answer(request) if callable(answer) else answer
        return ModelResponse(
            output=output,
            model="m-2026",
            provider="acme",
            finish_reason="stop",
            usage={"input_tokens": tokens[0], "output_tokens": tokens[1]},
        )

    return respond


def world_with_usage(durability: DurabilityStore, **kw: Any) -> World:
    world = make_world(durability, **kw)

    def interpret(request: ModelRequest) -> Any:
        return {"intentions": world.routes.get(str(request.input["text"]), [])}

    world.gateway.set("interpret", priced(interpret, (100, 20)))
    world.gateway.set("compose", priced(cite_all, (60, 10)))
    return world


async def test_each_model_call_is_recorded_with_its_prompt_hash_sizes_and_usage(
    durability: DurabilityStore,
) -> None:
    world = world_with_usage(durability)
    world.say("where is order 42?", LOOKUP)
    result = await world.run("turn-1", "where is order 42?")
    events = world.collector.for_turn("turn-1")
    invoked = [e for e in events if e.type == "model.invoked"]
    completed = [e for e in events if e.type == "model.completed"]
    assert [e.data["task"] for e in invoked] == ["interpret", "compose"]
    assert [e.causation_id for e in completed] == [e.id for e in invoked]
    for event, request in zip(invoked, world.gateway.calls, strict=True):
        sent = json.dumps(request.input, ensure_ascii=False, separators=(",", ":")).encode()
        schema = json.dumps(request.output_schema, ensure_ascii=False, separators=(",", ":"))
        told = request.system.encode()
        parts = (request.task.encode(), told, sent, schema.encode())
        assert event.data["prompt_sha256"] == hashlib.sha256(b"\0".join(parts)).hexdigest()
        assert event.data["input_bytes"] == len(sent)
        assert event.data["schema_bytes"] == len(schema.encode())
        assert event.data["prompt_bytes"] == len(told) + len(sent) + len(schema.encode())
        assert event.data["model"] == "ScriptedModelGateway"
        assert event.category is EventCategory.TRACE
    interpret, compose = (e.data for e in completed)
    assert interpret["input_tokens"] == 100 and interpret["output_tokens"] == 20
    assert compose["input_tokens"] == 60 and compose["output_tokens"] == 10
    assert interpret["provider"] == "acme" and interpret["model"] == "m-2026"
    assert interpret["finish_reason"] == "stop" and interpret["refusal"] is None
    assert result.usage == TurnUsage(input_tokens=160, output_tokens=30, model_calls=2)
    # Outbox and sinks hold the same events.
    stored = [s.event for s in await durability.read_outbox(turn_id="turn-1")]
    mine = sorted([*invoked, *completed], key=lambda e: e.sequence)
    assert [e for e in stored if e.type.startswith("model.")] == mine


async def test_durations_come_from_the_kernel_clock(durability: DurabilityStore) -> None:
    world = make_world(durability)
    clocked = type(world.kernel)(
        durability=durability,
        model=world.gateway,
        ports=world.kernel.ports,
        sinks=[world.collector],
        clock=Ticking(),
    )
    agent = clocked.compile(world.agent_definition())
    world.say("where is order 42?", LOOKUP)
    await agent.run(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    durations = [e.data["duration_ms"] for e in world.collector.of_type("model.completed")]
    assert durations == [250, 250]  # one tick between the readings around each call


async def test_a_replay_costs_zero_tokens(durability: DurabilityStore) -> None:
    world = world_with_usage(durability)
    world.say("where is order 42?", LOOKUP)
    first = await world.run("turn-1", "where is order 42?")
    assert first.usage.input_tokens == 160
    calls = world.gateway.count()
    events = len(world.collector.events)
    again = await world.run("turn-1", "where is order 42?")
    assert again.replayed is True
    assert again.usage == TurnUsage()
    assert again.usage.input_tokens == again.usage.output_tokens == again.usage.model_calls == 0
    assert world.gateway.count() == calls
    assert len(world.collector.events) == events


async def test_model_events_go_through_the_redactor(durability: DurabilityStore) -> None:
    def redact(event: KernelEvent) -> KernelEvent:
        if event.type.startswith("model."):
            data = {k: v for k, v in event.data.items() if k not in ("model", "provider")}
            return event.model_copy(update={"data": data})
        return event

    world = world_with_usage(durability, redact=redact)
    world.say("where is order 42?", LOOKUP)
    await world.run("turn-1", "where is order 42?")
    stored = [s.event for s in await durability.read_outbox(turn_id="turn-1")]
    model_events = [e for e in stored if e.type.startswith("model.")]
    assert len(model_events) == 4
    for event in model_events + world.collector.of_type("model.completed"):
        assert "model" not in event.data and "provider" not in event.data
        assert "task" in event.data
