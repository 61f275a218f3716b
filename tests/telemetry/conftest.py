"""Telemetry test wiring: the SDK's in-memory exporters, one provider per test (never the
global one), and a travel desk on a SQLite store that reports usage like a real provider."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from intention_kernel.contracts import ModelRequest, ModelResponse
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.examples.travel_desk import FakeHotelProvider, build_agent, scripted_model
from intention_kernel.kernel import CompiledAgent, Kernel, Redactor, TurnResult
from intention_kernel.testing import ScriptedModelGateway

HOST = {"actor": "ann@example.com", "tenant": "acme"}
MODEL = "desk-model-1"


class ReportingModel:
    """The travel desk's scripted model, answering as a provider does: model, provider,
    finish reason and tokens. While it answers it starts a span of its own, as an instrumented
    HTTP client would, so tests can see where such spans nest."""

    provider = "acme-ai"
    model = MODEL

    def __init__(self, tracer_provider: TracerProvider) -> None:
        self.script: ScriptedModelGateway = scripted_model()
        self.tracer = tracer_provider.get_tracer("http-client")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        with self.tracer.start_as_current_span("POST /v1/chat"):
            answer = await self.script.complete(request)
        return ModelResponse(
            output=answer.output,
            model=f"{MODEL}-2026-01",
            provider="acme-ai",
            usage={"input_tokens": 120, "output_tokens": 30},
            finish_reason="stop",
        )


class TracedHotels(FakeHotelProvider):
    """The fake provider, with a span of its own per booking call (an instrumented client)."""

    def __init__(self, tracer_provider: TracerProvider) -> None:
        super().__init__()
        self.tracer = tracer_provider.get_tracer("hotel-client")

    async def book(self, quote: dict[str, Any], *, idempotency_key: str) -> dict[str, Any]:
        with self.tracer.start_as_current_span("POST /bookings"):
            return await super().book(quote, idempotency_key=idempotency_key)


@dataclass
class Traced:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    def spans(self) -> list[ReadableSpan]:
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)


@dataclass
class Measured:
    provider: MeterProvider
    reader: InMemoryMetricReader

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """``(attributes, point)`` of every data point of metric ``name``."""
        found: list[tuple[dict[str, Any], Any]] = []
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend((dict(p.attributes or {}), p) for p in metric.data.data_points)
        return found


@pytest.fixture
def traced() -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Traced(provider, exporter)
    provider.shutdown()


@pytest.fixture
def measured() -> Iterator[Measured]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield Measured(provider, reader)
    provider.shutdown()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteDurability]:
    durability = await SQLiteDurability.open(tmp_path / "desk.db")
    yield durability
    await durability.close()


@dataclass
class Desk:
    agent: CompiledAgent
    hotels: TracedHotels

    async def say(self, turn: str, text: str, **extra: Any) -> TurnResult:
        return await self.agent.run(
            thread_id="t1", turn_id=turn, text=text, host_context=HOST, **extra
        )

    async def held_booking(self) -> TurnResult:
        """Search, quote, then "Book it": the booking waits for confirmation."""
        await self.say("1", "Find me a hotel in Lisbon for 2 nights")
        await self.say("2", "How much is the Alfama Inn?")
        return await self.say("3", "Book it")

    async def confirm(self, held: TurnResult, turn: str = "4") -> TurnResult:
        """The user presses "yes" (a selection: no interpretation)."""
        interaction = held.checkpoint.interaction
        assert interaction is not None
        return await self.say(
            turn, "", selection={"interaction_id": interaction.id, "option": "yes"}
        )


def make_desk(
    durability: object,
    traced: Traced | None,
    measured: Measured | None = None,
    redact: Redactor | None = None,
) -> Desk:
    tracer_provider = traced.provider if traced is not None else TracerProvider()
    hotels = TracedHotels(tracer_provider)
    kernel = Kernel(
        durability=durability,  # type: ignore[arg-type]
        model=ReportingModel(tracer_provider),
        ports={"hotels": hotels},
        redact=redact,
        tracer_provider=traced.provider if traced is not None else None,
        meter_provider=measured.provider if measured is not None else None,
    )
    return Desk(kernel.compile(build_agent()), hotels)
