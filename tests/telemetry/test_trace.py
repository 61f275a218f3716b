"""The trace of a booking turn: span names, attributes, parent/child links, no secrets."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from intention_kernel.contracts import KernelEvent, ModelGatewayError
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.telemetry import key_hash

from .conftest import MODEL, Traced, make_desk


def tree(spans: list[ReadableSpan]) -> list[str]:
    """The spans as an indented outline (children under their parent, in start order)."""
    by_id = {s.context.span_id: s for s in spans if s.context is not None}

    def depth(span: ReadableSpan) -> int:
        level = 0
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            level += 1
        return level

    return ["  " * depth(s) + s.name for s in spans]


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, span.name
    [parent] = [
        s for s in spans if s.context is not None and s.context.span_id == span.parent.span_id
    ]
    return parent


def everything_shown(spans: list[ReadableSpan]) -> str:
    """Every name, attribute and span event value of the trace, as one text."""
    parts: list[Any] = []
    for span in spans:
        parts.append(span.name)
        parts.extend(dict(span.attributes or {}).items())
        for event in span.events:
            parts.append(event.name)
            parts.extend(dict(event.attributes or {}).items())
    return json.dumps(parts, default=str)


async def test_a_booking_is_one_trace_per_turn_with_the_pipeline_nested(
    store: SQLiteDurability, traced: Traced
) -> None:
    desk = make_desk(store, traced)
    held = await desk.held_booking()
    proposing = traced.spans()
    traced.exporter.clear()
    booked = await desk.confirm(held)
    assert booked.response.text.startswith("Booked: Alfama Inn")
    confirming = traced.spans()

    third = [s for s in proposing if s.context is not None]
    turn3 = next(s for s in named(third, "ik.turn") if (s.attributes or {})["ik.turn.id"] == "3")
    turn3_spans = [s for s in third if s.context.trace_id == turn3.context.trace_id]
    assert tree(turn3_spans) == [
        "ik.turn",
        f"  chat {MODEL}",
        "    POST /v1/chat",
        "  ik.plan",
        f"  chat {MODEL}",
        "    POST /v1/chat",
    ]
    assert tree(confirming) == [
        "ik.turn",
        "  ik.plan",
        "  ik.step hotels.book",
        "    ik.effect hotels.book",
        "      POST /bookings",
        f"  chat {MODEL}",
        "    POST /v1/chat",
    ]
    # Each turn is its own trace (the host's span, if any, would be the parent).
    assert turn3.parent is None
    assert len({s.context.trace_id for s in confirming if s.context is not None}) == 1

    attrs = dict(turn3.attributes or {})
    waited = attrs.pop("ik.lease.wait_ms")
    assert isinstance(waited, float) and waited >= 0
    assert attrs == {
        "ik.agent.id": "travel-desk",
        "ik.agent.version": "1.0.0",
        "ik.agent.fingerprint": desk.agent.fingerprint,
        "ik.thread.id": "t1",
        "ik.turn.id": "3",
        "db.system.name": "sqlite",
        "ik.turn.outcome": "committed",
        "ik.turn.replayed": False,
    }
    assert turn3.status.status_code is StatusCode.UNSET

    [interpret, compose] = named(turn3_spans, f"chat {MODEL}")
    assert interpret.kind is SpanKind.CLIENT
    assert dict(interpret.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "acme-ai",
        "gen_ai.system": "acme-ai",
        "gen_ai.request.model": MODEL,
        "gen_ai.response.model": f"{MODEL}-2026-01",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.response.finish_reasons": ("stop",),
        "ik.model.task": "interpret",
    }
    assert (compose.attributes or {})["ik.model.task"] == "compose"

    [plan] = named(turn3_spans, "ik.plan")
    assert dict(plan.attributes or {}) == {
        "ik.plan.round": 1,
        "ik.plan.steps": 0,
        "ik.plan.held": 1,
        "ik.plan.clarifications": 0,
    }
    [held_event] = plan.events
    assert held_event.name == "ik.step.held"
    assert dict(held_event.attributes or {}) == {
        "ik.capability.id": "hotels.book",
        "ik.hold.reason": "awaiting_confirmation",
    }

    [step] = named(confirming, "ik.step hotels.book")
    assert dict(step.attributes or {}) == {
        "ik.capability.id": "hotels.book",
        "ik.capability.version": "1.0.0",
        "ik.capability.effect": "write",
        "ik.step.id": "resume-1",
        "ik.step.status": "completed",
    }
    [effect] = named(confirming, "ik.effect hotels.book")
    [receipt] = booked.checkpoint.receipts
    assert dict(effect.attributes or {}) == {
        "ik.capability.id": "hotels.book",
        "ik.effect.key_sha256": key_hash(receipt.idempotency_key),
        "ik.receipt.id": receipt.id,
        "ik.receipt.attempts": 1,
        "ik.effect.replayed": False,
        "ik.receipt.status": "completed",
    }
    assert parent_of(effect, confirming) is step
    assert parent_of(step, confirming).name == "ik.turn"

    # No message text, no provider payload, no raw key, no host context anywhere in the trace.
    shown = everything_shown(third + confirming)
    for secret in (
        "Book it",
        "Lisbon",
        "Alfama",
        "BK-1001",
        "240",
        "ann@example.com",
        receipt.idempotency_key,
        "Q-alfama-inn-2n",
    ):
        # As a whole value, not inside another one: an id or a hash may hold "240" by chance.
        assert not re.search(rf"(?<![0-9A-Za-z]){re.escape(secret)}(?![0-9A-Za-z])", shown), secret


async def test_outbox_events_carry_the_turn_span_as_traceparent(
    store: SQLiteDurability, traced: Traced
) -> None:
    desk = make_desk(store, traced)
    await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    [turn] = named(traced.spans(), "ik.turn")
    assert turn.context is not None
    expected = f"00-{turn.context.trace_id:032x}-{turn.context.span_id:016x}-"
    stored = await store.read_outbox(thread_id="t1")
    assert stored and all(
        s.event.traceparent is not None and s.event.traceparent.startswith(expected) for s in stored
    )
    # Stored and read back intact: the field round-trips through the store's JSON.
    assert KernelEvent.model_validate_json(stored[0].event.model_dump_json()) == stored[0].event


async def test_without_an_sdk_events_are_stored_exactly_as_before(
    store: SQLiteDurability,
) -> None:
    desk = make_desk(store, None)  # the global provider: no SDK configured
    await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    stored = await store.read_outbox(thread_id="t1")
    assert stored
    for item in stored:
        assert item.event.traceparent is None
        dumped = item.event.model_dump(mode="json")
        assert "traceparent" not in dumped
        assert "traceparent" not in item.event.model_dump_json()
        assert list(dumped) == [
            "id",
            "type",
            "version",
            "occurred_at",
            "thread_id",
            "turn_id",
            "step_id",
            "sequence",
            "correlation_id",
            "causation_id",
            "category",
            "data",
        ]


def test_a_malformed_traceparent_is_refused() -> None:
    from pydantic import ValidationError

    base = {
        "id": "evt_1",
        "type": "x",
        "occurred_at": "2026-01-01T00:00:00Z",
        "thread_id": "t",
        "turn_id": "u",
        "sequence": 0,
        "correlation_id": "c",
    }
    with pytest.raises(ValidationError):
        KernelEvent.model_validate({**base, "traceparent": "00-abc\r\nX-Injected: 1"})
    event = KernelEvent.model_validate({**base, "traceparent": f"00-{'1' * 32}-{'2' * 16}-01"})
    assert event.traceparent is not None


async def test_a_replay_is_one_span_that_says_so(store: SQLiteDurability, traced: Traced) -> None:
    desk = make_desk(store, traced)
    await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    traced.exporter.clear()
    again = await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    assert again.replayed
    spans = traced.spans()
    assert tree(spans) == ["ik.turn"]
    attrs = spans[0].attributes or {}
    assert attrs["ik.turn.replayed"] is True
    assert attrs["ik.turn.outcome"] == "replayed"


async def test_a_write_in_doubt_is_an_uncertain_effect_in_a_committed_turn(
    store: SQLiteDurability, traced: Traced
) -> None:
    desk = make_desk(store, traced)
    held = await desk.held_booking()

    async def broken(quote: dict[str, Any], *, idempotency_key: str) -> dict[str, Any]:
        raise ConnectionResetError("lost the answer for secret-token-9")

    desk.hotels.book = broken  # type: ignore[method-assign]
    traced.exporter.clear()
    answered = await desk.confirm(held)
    assert "being verified" in answered.response.text
    spans = traced.spans()
    [turn] = named(spans, "ik.turn")
    [step] = named(spans, "ik.step hotels.book")
    [effect] = named(spans, "ik.effect hotels.book")
    assert (turn.attributes or {})["ik.turn.outcome"] == "committed"
    assert (step.attributes or {})["ik.step.status"] == "uncertain"
    assert (effect.attributes or {})["ik.receipt.status"] == "uncertain"
    assert effect.status.status_code is StatusCode.ERROR
    errors = "intention_kernel.contracts.errors"
    assert (effect.attributes or {})["error.type"] == f"{errors}.EffectUncertainError"
    assert "secret-token-9" not in everything_shown(spans)  # exception messages stay out


async def test_a_failing_model_marks_its_call_and_the_turn_as_errors(
    store: SQLiteDurability, traced: Traced
) -> None:
    desk = make_desk(store, traced)

    async def failing(request: object) -> object:
        raise TimeoutError("upstream said secret-token-7")

    gateway = desk.agent._runtime.routes["interpret"].gateway
    gateway.complete = failing  # type: ignore[method-assign,assignment]
    with pytest.raises(ModelGatewayError):
        await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    spans = traced.spans()
    [turn] = named(spans, "ik.turn")
    [chat] = named(spans, f"chat {MODEL}")
    for span in (turn, chat):
        assert span.status.status_code is StatusCode.ERROR
    assert (chat.attributes or {})["error.type"] == "TimeoutError"  # a builtin: its bare name
    errors = "intention_kernel.contracts.errors"
    assert (turn.attributes or {})["error.type"] == f"{errors}.ModelGatewayError"
    assert (turn.attributes or {})["ik.turn.outcome"] == "error"
    assert "secret-token-7" not in everything_shown(spans)
    assert all(not span.events for span in (turn, chat))


async def test_the_redactor_applies_to_span_attributes(
    store: SQLiteDurability, traced: Traced
) -> None:
    seen: list[str] = []

    def redact(event: KernelEvent) -> KernelEvent:
        seen.append(event.type)
        if "ik.thread.id" in event.data:
            return event.model_copy(update={"data": {**event.data, "ik.thread.id": "[hidden]"}})
        return event

    desk = make_desk(store, traced, redact=redact)
    await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    [turn] = named(traced.spans(), "ik.turn")
    assert (turn.attributes or {})["ik.thread.id"] == "[hidden]"
    assert {"telemetry.turn", "telemetry.chat", "telemetry.step"} <= set(seen)
    # Outbox events keep their envelope (the redactor changes only data).
    stored = await store.read_outbox(thread_id="t1")
    assert all(s.event.thread_id == "t1" for s in stored)


async def test_a_raising_capability_marks_its_step_span_and_the_turn_commits(
    store: SQLiteDurability, traced: Traced
) -> None:
    from pydantic import BaseModel

    from intention_kernel.kernel import (
        CapabilityContext,
        Completed,
        Kernel,
        define_agent,
        define_capability,
    )
    from intention_kernel.testing import ScriptedModelGateway

    class Nothing(BaseModel):
        pass

    async def unreachable(context: CapabilityContext, query: Nothing) -> Completed:
        raise ConnectionError("no route to secret-token-5")

    kernel = Kernel(
        durability=store,
        model=ScriptedModelGateway(
            {"interpret": {"intentions": [{"capability": "rates.today", "input": {}}]}}
        ),
        tracer_provider=traced.provider,
    )
    agent = kernel.compile(
        define_agent(
            id="rates",
            version="1.0.0",
            description="Exchange rates.",
            capabilities=[
                define_capability(
                    id="rates.today",
                    version="1.0.0",
                    description="Today's rates.",
                    input=Nothing,
                    output=Nothing,
                    execute=unreachable,
                )
            ],
        )
    )
    result = await agent.run(thread_id="t9", turn_id="1", text="rates?")
    assert [s.status for s in result.response.steps] == ["failed"]
    spans = traced.spans()
    [turn] = named(spans, "ik.turn")
    [step] = named(spans, "ik.step rates.today")
    assert (turn.attributes or {})["ik.turn.outcome"] == "committed"
    assert turn.status.status_code is not StatusCode.ERROR
    assert (step.attributes or {})["ik.step.status"] == "failed"
    assert (step.attributes or {})["error.type"] == "ConnectionError"
    assert step.status.status_code is StatusCode.ERROR
    assert "secret-token-5" not in everything_shown(spans)
