"""What keeps a traced turn cheap without changing what it shows: attributes given at a span's
start (the sampler sees them) and at its end in one set, one redaction per set, metric
attribute sets built once per kernel and never per thread or turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes

from intention_kernel.contracts.events import KernelEvent
from intention_kernel.durability.sqlite import SQLiteDurability

from .conftest import Measured, Traced, make_desk


class Watching(Sampler):
    """Samples everything; keeps the attributes each span name was started with."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, Any]] = {}

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        self.seen[name] = dict(attributes or {})
        return ALWAYS_ON.should_sample(parent_context, trace_id, name, kind, attributes, links)

    def get_description(self) -> str:
        return "watching"


async def test_a_sampler_sees_the_attributes_a_span_starts_with(
    store: SQLiteDurability,
) -> None:
    sampler = Watching()
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        desk = make_desk(store, Traced(provider, exporter))
        await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    finally:
        provider.shutdown()
    assert sampler.seen["ik.turn"]["ik.agent.id"] == "travel-desk"
    assert sampler.seen["ik.turn"]["ik.turn.id"] == "1"
    assert sampler.seen["ik.step hotels.search"]["ik.capability.id"] == "hotels.search"
    assert "ik.step.status" not in sampler.seen["ik.step hotels.search"]  # known at its end
    [step] = [s for s in exporter.get_finished_spans() if s.name == "ik.step hotels.search"]
    assert (step.attributes or {})["ik.step.status"] == "completed"


async def test_each_attribute_set_is_redacted_once(store: SQLiteDurability, traced: Traced) -> None:
    seen: list[tuple[str, tuple[str, ...], str, str]] = []

    def redact(event: KernelEvent) -> KernelEvent:
        if event.type.startswith("telemetry."):
            seen.append((event.type, tuple(event.data), event.thread_id, event.turn_id))
            if "gen_ai.usage.input_tokens" in event.data:
                return event.model_copy(
                    update={"data": {**event.data, "gen_ai.usage.input_tokens": {"no": 1}}}
                )
        return event

    desk = make_desk(store, traced, redact=redact)
    await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    kinds = [kind for kind, _, _, _ in seen]
    spans = traced.spans()
    # One set when a span starts (the plan starts with none), one when it ends (the turn's
    # end attributes are the kernel's own).
    children = [s for s in spans if s.name != "ik.turn" and not s.name.startswith("POST")]
    assert len(seen) == 1 + 2 * len(children) - 1
    assert kinds.count("telemetry.turn") == 1
    assert kinds.count("telemetry.plan") == 1
    assert all(thread == "t1" and turn == "1" for _, _, thread, turn in seen)
    ended = [keys for kind, keys, _, _ in seen if kind == "telemetry.chat"][1]
    assert "gen_ai.usage.input_tokens" in ended and "gen_ai.operation.name" not in ended
    # A value the redactor turns into a non-attribute value is dropped, the rest is kept.
    chat = next(s for s in spans if s.name.startswith("chat "))
    assert "gen_ai.usage.input_tokens" not in (chat.attributes or {})
    assert (chat.attributes or {})["gen_ai.usage.output_tokens"] == 30


async def test_metric_attribute_sets_do_not_grow_with_threads_or_turns(
    store: SQLiteDurability, traced: Traced, measured: Measured
) -> None:
    desk = make_desk(store, traced, measured)
    await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    built = dict(desk.agent._telemetry._points)
    for n in range(2, 6):
        await desk.agent.run(
            thread_id=f"t{n}", turn_id="1", text="Find me a hotel in Lisbon for 2 nights"
        )
    assert desk.agent._telemetry._points == built
    assert all("ik.thread.id" not in a and "ik.turn.id" not in a for a in built.values())
    durations = measured.points("ik.turn.duration")
    assert [a for a, _ in durations] == [
        {"ik.agent.id": "travel-desk", "ik.turn.outcome": "committed"}
    ]
    assert durations[0][1].count == 5
