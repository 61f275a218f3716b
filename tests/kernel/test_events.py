"""Events: full envelope, causal branches, redaction before anything leaves the kernel."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from intention_kernel.contracts import (
    ConfigurationError,
    DurabilityStore,
    EventCategory,
    KernelEvent,
)
from intention_kernel.contracts.sinks import PublishOutcome

from .support import World, make_world

SECRET = "4111-1111-1111-1111"


def _redact(event: KernelEvent) -> KernelEvent:
    data = {k: ("[redacted]" if k in ("text", "input") else v) for k, v in event.data.items()}
    return event.model_copy(update={"data": data, "sequence": 999, "type": "hijacked"})


async def test_redactor_applies_to_outbox_and_sinks(durability: DurabilityStore) -> None:
    world = make_world(durability, redact=_redact)
    text = f"is card {SECRET} on order 42?"
    world.say(text, [{"capability": "orders.lookup", "input": {"order_id": SECRET}}])
    result = await world.run("turn-1", text)
    assert SECRET in result.response.text  # the caller's own answer is not redacted
    stored = await durability.read_outbox(thread_id="t1")
    assert stored, "the outbox is committed with the turn"
    for item in stored:
        assert SECRET not in item.event.model_dump_json()
    for event in world.collector.events:
        assert SECRET not in event.model_dump_json()
    # The envelope belongs to the kernel: a redactor cannot reorder or rename events.
    assert [e.event.sequence for e in stored] == list(range(len(stored)))
    assert "hijacked" not in {e.event.type for e in stored}


async def test_envelope_sequence_correlation_and_causal_branches(world: World) -> None:
    world.shop.barrier = asyncio.Barrier(2)
    world.say(
        "hours and returns?",
        [
            {"capability": "store.hours", "input": {}},
            {"capability": "faq.search", "input": {"topic": "returns"}},
        ],
    )
    result = await world.run("turn-1", "hours and returns?")
    events = world.collector.for_turn("turn-1")
    stored = [s.event for s in await world.durability.read_outbox(turn_id="turn-1")]
    assert stored == events
    assert [e.sequence for e in events] == list(range(len(events)))
    assert {e.correlation_id for e in events} == {result.trace_id}
    assert len({e.id for e in events}) == len(events)
    by_id = {e.id: e for e in events}
    types = [e.type for e in events]
    assert types[0] == "turn.started" and types[-1] == "turn.committed"
    for expected in ("interpretation.completed", "plan.created", "response.composed"):
        assert expected in types
    plan = next(e for e in events if e.type == "plan.created")
    starts = [e for e in events if e.type == "step.started"]
    assert len(starts) == 2
    for start in starts:
        assert start.causation_id == plan.id
        ends = [e for e in events if e.type == "step.completed" and e.step_id == start.step_id]
        assert [e.causation_id for e in ends] == [start.id]
    # A capability's own event hangs off its step's branch.
    custom = next(e for e in events if e.type == "hours.looked_up")
    assert by_id[custom.causation_id or ""].type == "step.started"
    assert by_id[custom.causation_id or ""].step_id == custom.step_id
    assert plan.category is EventCategory.AUDIT


async def test_facts_event_names_the_fact_and_its_evidence(world: World) -> None:
    world.say("where is order 42?", [{"capability": "orders.lookup", "input": {"order_id": "42"}}])
    result = await world.run("turn-1", "where is order 42?")
    [facts] = world.collector.of_type("facts.recorded")
    assert facts.data == {"facts": ["order@1"], "evidence_id": result.response.evidence[0].id}


async def test_a_failing_sink_does_not_fail_a_committed_turn(durability: DurabilityStore) -> None:
    class Broken:
        async def publish(self, events: object) -> list[PublishOutcome]:
            raise RuntimeError("sink down")

        async def close(self) -> None:
            return None

    world = make_world(durability)
    world.agent._sinks = (Broken(), world.collector)
    result = await world.run("turn-1", "hi")
    assert result.checkpoint.revision == 1
    assert world.collector.events


async def test_a_failing_sink_is_logged_without_the_payload(
    durability: DurabilityStore, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        async def publish(self, events: object) -> list[PublishOutcome]:
            raise RuntimeError(f"sink down while sending {SECRET}")

        async def close(self) -> None:
            return None

    world = make_world(durability)
    world.agent._sinks = (Broken(), world.collector)
    world.say(f"card {SECRET}", [])
    with caplog.at_level(logging.WARNING, logger="intention_kernel.events"):
        result = await world.run("turn-1", f"card {SECRET}")
    assert result.checkpoint.revision == 1
    [record] = [r for r in caplog.records if r.name == "intention_kernel.events"]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "Broken" in message and "RuntimeError" in message and "turn.started" in message
    assert SECRET not in message and SECRET not in caplog.text
    assert world.collector.events, "the other sinks still get every event"


async def test_events_a_sink_does_not_accept_are_logged(
    durability: DurabilityStore, caplog: pytest.LogCaptureFixture
) -> None:
    class Refusing:
        async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
            return [PublishOutcome.reject(f"too large: {SECRET}") for _ in events]

        async def close(self) -> None:
            return None

    world = make_world(durability)
    world.agent._sinks = (Refusing(),)
    world.say(f"card {SECRET}", [])
    with caplog.at_level(logging.WARNING, logger="intention_kernel.events"):
        await world.run("turn-1", f"card {SECRET}")
    records = [r for r in caplog.records if r.name == "intention_kernel.events"]
    assert records and all(r.levelno == logging.WARNING for r in records)
    messages = [r.getMessage() for r in records]
    assert all("Refusing" in m and "reject" in m for m in messages)
    for event_type in ("turn.started", "response.composed", "turn.committed"):
        assert any(event_type in m for m in messages), event_type
    assert SECRET not in caplog.text


async def test_a_broken_redactor_fails_the_turn_before_anything_is_written(
    durability: DurabilityStore,
) -> None:
    from intention_kernel.contracts import ConfigurationError

    world = make_world(durability, redact=lambda event: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigurationError):
        await world.run("turn-1", "hi")
    assert await durability.load_checkpoint("t1") is None
    assert await durability.read_outbox(thread_id="t1") == []
    assert world.collector.events == []


def test_prebuilt_events_equal_validated_ones() -> None:
    from datetime import UTC, datetime

    from intention_kernel.kernel._events import _prebuilt, _validated, build_event

    fields = {
        "id": "evt_1",
        "type": "x",
        "version": 1,
        "occurred_at": datetime.now(UTC),
        "thread_id": "t",
        "turn_id": "u",
        "step_id": "step-1",
        "sequence": 3,
        "correlation_id": "c",
        "causation_id": "evt_0",
        "category": EventCategory.AUDIT,
        "data": {"a": {"b": [1, 2.5, True, None]}},
        "traceparent": f"00-{'a' * 32}-{'b' * 16}-01",
    }
    fast, slow = _prebuilt(dict(fields)), _validated(dict(fields))
    assert build_event is _prebuilt
    assert fast == slow
    assert fast.model_dump() == slow.model_dump()
    assert KernelEvent.model_validate_json(fast.model_dump_json()) == slow


async def test_capability_event_data_that_is_not_json_fails_its_step_cleanly(
    durability: DurabilityStore,
) -> None:
    from intention_kernel.kernel import Completed, define_capability

    from .support import FaqAnswer, FaqQuery, support_agent

    async def noisy(context: Any, query: FaqQuery) -> Completed:
        context.events.emit("noisy", {"bad": float("nan")})
        return Completed(output=FaqAnswer(answer="-"))

    cap = define_capability(
        id="noisy.cap",
        version="1.0.0",
        description="Be noisy.",
        input=FaqQuery,
        output=FaqAnswer,
        execute=noisy,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("noise", [{"capability": "noisy.cap", "input": {"topic": "x"}}])
    result = await world.run("turn-1", "noise")
    [step] = result.response.steps
    assert step.status == "failed" and step.retryable is False
    outbox = [s.event for s in await durability.read_outbox(thread_id="t1")]
    assert "noisy" not in [e.type for e in outbox]  # nothing recorded for the refused call
    [failed] = [e for e in outbox if e.type == "step.failed"]
    assert failed.data["error"] == {
        "type": "intention_kernel.contracts.errors.SerializationError",
        "retryable": False,
        "code": "NON_FINITE_NUMBER",
    }


async def test_provider_exceptions_become_model_gateway_errors(world: World) -> None:
    from intention_kernel.contracts import ErrorCode, ModelGatewayError

    def boom(request: object) -> object:
        raise ConnectionError("provider down")

    world.gateway.set("interpret", boom)
    with pytest.raises(ModelGatewayError) as info:
        await world.run("turn-1", "hi")
    assert info.value.code == ErrorCode.MODEL_GATEWAY_FAILED and info.value.retryable
    assert isinstance(info.value.__cause__, ConnectionError)


class _Opaque:
    """Not JSON: neither the codec nor pydantic may guess a form for it."""


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"tags": {1, 2}}, "tags"),
        ({"who": _Opaque()}, "who"),
        ({"raw": [b"\xff\xfe"]}, "raw"),
        ({"deep": {"n": float("nan")}}, "deep"),
    ],
    ids=["set", "object", "invalid-utf8-bytes", "nan"],
)
async def test_capability_event_data_is_refused_at_emit_with_a_typed_error(
    durability: DurabilityStore, value: dict[str, Any], where: str
) -> None:
    """The capability sees the error where it emitted, and can carry on without the event."""
    from intention_kernel.contracts import SerializationError
    from intention_kernel.kernel import Completed, define_capability

    from .support import FaqAnswer, FaqQuery, support_agent

    seen: list[BaseException] = []

    async def careful(context: Any, query: FaqQuery) -> Completed:
        try:
            context.events.emit("careful.noted", value)
        except Exception as exc:
            seen.append(exc)
        return Completed(output=FaqAnswer(answer="-"), text="Done.")

    cap = define_capability(
        id="careful.cap",
        version="1.0.0",
        description="Be careful.",
        input=FaqQuery,
        output=FaqAnswer,
        execute=careful,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("careful", [{"capability": "careful.cap", "input": {"topic": "x"}}])
    result = await world.run("turn-1", "careful")
    [error] = seen
    assert isinstance(error, SerializationError)
    assert "careful.noted" in error.message and where in str(error.context)
    assert result.checkpoint.revision == 1
    stored = await durability.read_outbox(thread_id="t1")
    assert "careful.noted" not in {s.event.type for s in stored}


async def test_capability_event_data_is_stored_as_it_was_emitted(
    durability: DurabilityStore,
) -> None:
    """The event a capability gets back is the one the outbox holds."""
    from intention_kernel.kernel import Completed, define_capability

    from .support import FaqAnswer, FaqQuery, support_agent

    emitted: list[KernelEvent] = []

    async def tidy(context: Any, query: FaqQuery) -> Completed:
        emitted.append(context.events.emit("tidy.noted", {"pair": [1, "a"], "text": "é\u200b"}))
        return Completed(output=FaqAnswer(answer="-"), text="Done.")

    cap = define_capability(
        id="tidy.cap",
        version="1.0.0",
        description="Be tidy.",
        input=FaqQuery,
        output=FaqAnswer,
        execute=tidy,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("tidy", [{"capability": "tidy.cap", "input": {"topic": "x"}}])
    await world.run("turn-1", "tidy")
    [event] = emitted
    [stored] = [
        s.event
        for s in await durability.read_outbox(thread_id="t1")
        if s.event.type == "tidy.noted"
    ]
    assert event.data == stored.data == {"pair": [1, "a"], "text": "é\u200b"}


async def test_trace_events_can_stay_out_of_the_outbox(durability: DurabilityStore) -> None:
    kept = {EventCategory.AUDIT, EventCategory.INTEGRATION}
    world = make_world(durability, outbox_categories=kept)
    world.say("where is 42?", [{"capability": "orders.lookup", "input": {"order_id": "42"}}])
    await world.run("turn-1", "where is 42?")
    everything = world.collector.for_turn("turn-1")
    stored = [s.event for s in await durability.read_outbox(turn_id="turn-1")]
    assert EventCategory.TRACE in {e.category for e in everything}  # the sinks get them all
    assert stored == [e for e in everything if e.category in kept]  # the outbox the others
    assert stored and {e.type for e in stored} >= {"turn.started", "turn.committed"}
    # Sequences keep the turn's emission order; the trace events' numbers are the gaps.
    assert [e.sequence for e in stored] == sorted(e.sequence for e in stored)


@pytest.mark.parametrize("categories", ["trace", ["audit"], [None], 3])
def test_outbox_categories_must_be_event_categories(
    durability: DurabilityStore, categories: Any
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        make_world(durability, outbox_categories=categories)
    assert "outbox_categories" in str(caught.value.context)
