"""The GenAI conventions' metrics and names, and bucket boundaries fit for turns, through the
real gateways and SDKs (an in-process provider server) and the SDK's in-memory reader."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from opentelemetry.trace import StatusCode
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.providers.google import GoogleProvider

from intention_kernel.contracts import ModelGatewayError
from intention_kernel.contracts.gateway import ModelGateway
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.examples.travel_desk import FakeHotelProvider, build_agent
from intention_kernel.kernel import CompiledAgent, Kernel
from intention_kernel.models import OpenAIGateway, PydanticAIGateway, RetryPolicy

from ..models.fakes import FakeServer, openai_error, raises
from ..models.test_travel_desk import gemini_desk
from .conftest import HOST, MODEL, Measured, Traced, make_desk

OPERATION_BOUNDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48]
OPERATION_BOUNDS += [40.96, 81.92]
TOKEN_BOUNDS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]
TOKEN_BOUNDS += [16777216, 67108864]


def desk_on(
    store: SQLiteDurability, gateway: ModelGateway, traced: Traced, measured: Measured
) -> CompiledAgent:
    kernel = Kernel(
        durability=store,
        model=gateway,
        ports={"hotels": FakeHotelProvider()},
        tracer_provider=traced.provider,
        meter_provider=measured.provider,
    )
    return kernel.compile(build_agent())


async def test_histograms_have_bounds_for_their_values(
    store: SQLiteDurability, traced: Traced, measured: Measured
) -> None:
    desk = make_desk(store, traced, measured)
    await desk.held_booking()
    for name in ("ik.turn.duration", "ik.lease.wait"):
        points = measured.points(name)
        assert points
        for _, point in points:
            bounds = list(point.explicit_bounds)
            # Turns take milliseconds to minutes: buckets below 1 s and up to minutes, not the
            # SDK's default (0, 5, 10, 25, ...) that puts every turn under 5 s in one bucket.
            assert bounds[0] <= 0.01 and bounds[-1] >= 120
            assert sum(1 for b in bounds if b <= 1) >= 5
            assert point.count == sum(point.bucket_counts)
    for _, point in measured.points("gen_ai.client.token.usage"):
        assert list(point.explicit_bounds) == TOKEN_BOUNDS


async def test_every_model_call_has_an_operation_duration(
    store: SQLiteDurability, traced: Traced, measured: Measured
) -> None:
    desk = make_desk(store, traced, measured)
    await desk.held_booking()  # three turns: each interprets and composes once
    points = measured.points("gen_ai.client.operation.duration")
    by_task = {a["ik.model.task"]: p for a, p in points}
    assert {task: p.count for task, p in by_task.items()} == {"interpret": 3, "compose": 3}
    for attrs, point in points:
        assert attrs == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "acme-ai",
            "gen_ai.request.model": MODEL,
            "gen_ai.response.model": f"{MODEL}-2026-01",
            "ik.model.task": attrs["ik.model.task"],
        }
        assert list(point.explicit_bounds) == OPERATION_BOUNDS
        assert point.sum > 0


def failing_openai(answer: Any) -> OpenAIGateway:
    server = FakeServer(answer)
    return OpenAIGateway(
        "gpt-4.1-mini",
        api_key="sk-test-0123456789",
        http_client=server.client(),
        retry=RetryPolicy(attempts=1),
    )


@pytest.mark.parametrize(
    ("answer", "error_type"),
    [
        (openai_error(429, "Rate limit reached", "requests", "rate_limit_exceeded"), "429"),
        (openai_error(503, "Overloaded", "server_error"), "503"),
        (raises(httpx2.ReadTimeout), "timeout"),
        (raises(httpx2.ConnectError), "connection"),
    ],
)
async def test_a_failed_model_call_says_how_it_failed(
    store: SQLiteDurability, traced: Traced, measured: Measured, answer: Any, error_type: str
) -> None:
    agent = desk_on(store, failing_openai(answer), traced, measured)
    with pytest.raises(ModelGatewayError):
        await agent.run(thread_id="t1", turn_id="1", text="Find me a hotel", host_context=HOST)
    [chat] = [s for s in traced.exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert chat.status.status_code is StatusCode.ERROR
    assert (chat.attributes or {})["error.type"] == error_type
    [(attrs, point)] = measured.points("gen_ai.client.operation.duration")
    assert point.count == 1
    assert attrs == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4.1-mini",
        "ik.model.task": "interpret",
        "error.type": error_type,
    }


async def test_pydantic_ai_providers_have_the_conventions_names(
    store: SQLiteDurability, traced: Traced, measured: Measured
) -> None:
    server = FakeServer(gemini_desk)
    provider = GoogleProvider(api_key="AIza-test-0123456789", http_client=server.client())
    gateway = PydanticAIGateway(GoogleModel("gemini-3.5-flash-lite", provider=provider))
    agent = desk_on(store, gateway, traced, measured)
    found = await agent.run(
        thread_id="t1",
        turn_id="1",
        text="Find me a hotel in Lisbon for 2 nights",
        host_context=HOST,
    )
    assert "Alfama Inn" in found.response.text
    chats = [s for s in traced.exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert len(chats) == 2
    for chat in chats:
        assert (chat.attributes or {})["gen_ai.provider.name"] == "gcp.gemini"
    for name in ("gen_ai.client.token.usage", "gen_ai.client.operation.duration"):
        points = measured.points(name)
        assert points and {a["gen_ai.provider.name"] for a, _ in points} == {"gcp.gemini"}
