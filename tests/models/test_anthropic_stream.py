"""``AnthropicGateway.stream`` through the real ``anthropic`` SDK, served server-sent events by
an in-process fake server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest

from intention_kernel.contracts.errors import ModelGatewayError
from intention_kernel.contracts.gateway import (
    ModelOutputDelta,
    ModelRefusal,
    ModelRequest,
    ModelResponse,
    StreamingModelGateway,
)
from intention_kernel.kernel._pipeline.state import Interpretation
from intention_kernel.models import AnthropicGateway

from .fakes import (
    Clock,
    FakeServer,
    anthropic_body,
    anthropic_error,
    anthropic_error_event,
    anthropic_events,
    anthropic_stream,
    anthropic_tool_block,
    policy,
    sse,
)

INTERPRET = Interpretation.model_json_schema()
KEY = "sk-ant-api03-test0123456789"
VALUE = {"intentions": [{"capability": "desk.faq", "input": {"topic": "breakfast"}}]}
TOOL = [anthropic_tool_block("interpret", VALUE)]


def gateway(server: FakeServer, clock: Clock | None = None, **kw: Any) -> AnthropicGateway:
    return AnthropicGateway(
        "claude-sonnet-4-5",
        api_key=KEY,
        http_client=server.client(),
        retry=policy(clock or Clock(), **kw),
    )


def interpret() -> ModelRequest:
    return ModelRequest(
        task="interpret",
        system="Help travellers.",
        input={"text": "Is breakfast included?", "capabilities": []},
        output_schema=INTERPRET,
    )


async def collect(gw: AnthropicGateway) -> tuple[list[ModelOutputDelta], ModelResponse]:
    """The deltas and the final response; checks that the response comes once, last."""
    items = [item async for item in gw.stream(interpret())]
    *deltas, final = items
    assert isinstance(final, ModelResponse)
    assert all(isinstance(d, ModelOutputDelta) for d in deltas)
    return [d for d in deltas if isinstance(d, ModelOutputDelta)], final


def shown(deltas: list[ModelOutputDelta]) -> str:
    """What a consumer shows: the deltas since the last restart."""
    text = ""
    for delta in deltas:
        text = delta.text if delta.restarted else text + delta.text
    return text


def test_the_gateway_streams() -> None:
    gw = AnthropicGateway("claude-sonnet-4-5", api_key=KEY, http_client=FakeServer().client())
    assert isinstance(gw, StreamingModelGateway)


async def test_deltas_are_the_forced_tool_input_json() -> None:
    server = FakeServer(anthropic_stream(TOOL, usage=(100, 40, 10, 50)))
    deltas, final = await collect(gateway(server))
    assert len(deltas) > 3 and not any(d.restarted for d in deltas)
    assert "".join(d.text for d in deltas) == json.dumps(VALUE)
    assert all(d.text for d in deltas)  # the empty first partial_json is not a delta
    assert final.output == VALUE
    assert (final.model, final.provider, final.finish_reason) == (
        "claude-sonnet-4-5-20250929",
        "anthropic",
        "stop",
    )
    assert final.usage == {"input_tokens": 160, "output_tokens": 40}  # cache tokens counted
    body = server.body()
    assert body["stream"] is True
    assert body["tool_choice"] == {"type": "tool", "name": "interpret"}
    assert body["tools"][0]["input_schema"] == INTERPRET
    assert server.requests[0].headers["x-stainless-retry-count"] == "0"


@pytest.mark.parametrize(
    ("blocks", "options"),
    [
        (TOOL, {"usage": (100, 40, 10, 50)}),
        ([anthropic_tool_block("interpret", {"intentions": [], "reply": None})], {}),
        (TOOL, {"stop": "max_tokens"}),  # cut off: never used
        ([{"type": "text", "text": "I won't do that."}], {"stop": "refusal"}),
        ([{"type": "text", "text": "{oops"}], {"stop": "end_turn"}),  # no tool call: repair
        (
            [{"type": "text", "text": "Let me record that."}, *TOOL],
            {"model": "claude-haiku-4-5-20251001"},
        ),
    ],
)
async def test_the_final_response_is_the_one_complete_gives(
    blocks: list[dict[str, Any]], options: dict[str, Any]
) -> None:
    whole = await gateway(FakeServer(anthropic_body(blocks, **options))).complete(interpret())
    deltas, final = await collect(gateway(FakeServer(anthropic_stream(blocks, **options))))
    assert final == whole
    tools = [b for b in blocks if b["type"] == "tool_use"]
    assert "".join(d.text for d in deltas) == "".join(json.dumps(b["input"]) for b in tools)


async def test_a_refusal_is_never_streamed() -> None:
    server = FakeServer(anthropic_stream([{"type": "text", "text": "I won't."}], stop="refusal"))
    deltas, final = await collect(gateway(server))
    assert deltas == []
    assert final.refusal == ModelRefusal(kind="refusal", message="I won't.")
    assert (final.output, final.finish_reason) == (None, "refusal")


async def test_a_cut_off_answer_streams_but_is_never_used() -> None:
    server = FakeServer(anthropic_stream(TOOL, stop="max_tokens"))
    deltas, final = await collect(gateway(server))
    assert shown(deltas) == json.dumps(VALUE)
    assert (final.output, final.finish_reason) == (None, "length")
    assert final.usage == {"input_tokens": 100, "output_tokens": 40}


async def test_an_overload_before_the_first_delta_is_retried_like_complete() -> None:
    clock = Clock()
    server = FakeServer(
        anthropic_error(529, "overloaded_error", "Overloaded"),
        anthropic_error(429, "rate_limit_error", "Too many tokens", retry_after="12"),
        anthropic_stream(TOOL),
    )
    deltas, final = await collect(gateway(server, clock))
    assert not any(d.restarted for d in deltas)
    assert final.output == VALUE
    assert clock.waits == [0.5, 12.0]
    assert len(server.requests) == 3


async def test_an_overloaded_error_event_mid_stream_restarts_the_deltas() -> None:
    clock = Clock()
    cut = [*anthropic_events(TOOL, upto=6), anthropic_error_event("overloaded_error", "Overloaded")]
    server = FakeServer(sse(cut), anthropic_stream(TOOL))
    deltas, final = await collect(gateway(server, clock))
    restarts = [i for i, d in enumerate(deltas) if d.restarted]
    assert restarts == [2]  # two pieces of the first attempt, then the restart marker
    assert deltas[2] == ModelOutputDelta(text="", restarted=True)
    assert shown(deltas) == json.dumps(VALUE)
    assert final.output == VALUE
    assert clock.waits == [0.5]

    server = FakeServer(lambda _: sse(cut))  # a new body each time: a stream is read once
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server, Clock()))
    error = raised.value
    assert (error.retryable, error.context["kind"], error.context["status"]) == (
        True,
        "overloaded",
        529,
    )
    assert error.context["attempts"] == 4


async def test_a_connection_lost_mid_stream_is_retried() -> None:
    server = FakeServer(
        sse(anthropic_events(TOOL, upto=6), fail=httpx2.RemoteProtocolError),
        anthropic_stream(TOOL),
    )
    deltas, final = await collect(gateway(server))
    assert [d.restarted for d in deltas].count(True) == 1
    assert final.output == VALUE


async def test_a_stream_that_ends_before_its_stop_reason_is_a_lost_connection() -> None:
    server = FakeServer(lambda _: sse(anthropic_events(TOOL)[:-2]))  # no message_delta
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server))
    assert (raised.value.retryable, raised.value.context["kind"]) == (True, "connection")


async def test_a_stream_that_stalls_times_out_and_is_retried() -> None:
    stalled = sse(anthropic_events(TOOL, upto=6), stall=3600.0)  # a server that stops writing
    server = FakeServer(stalled, anthropic_stream(TOOL))
    async with asyncio.timeout(10):
        deltas, final = await collect(gateway(server, attempt_timeout=0.2))
    assert [d.restarted for d in deltas].count(True) == 1
    assert final.output == VALUE

    server = FakeServer(sse(anthropic_events(TOOL, upto=6), stall=3600.0))
    with pytest.raises(ModelGatewayError) as raised:
        async with asyncio.timeout(10):
            await collect(gateway(server, attempts=1, attempt_timeout=0.2))
    assert (raised.value.retryable, raised.value.context["kind"]) == (True, "timeout")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("authentication_error", "authentication"), ("invalid_request_error", "bad_request")],
)
async def test_a_final_error_event_is_not_retried_and_never_shows_the_key(
    kind: str, expected: str
) -> None:
    cut = [*anthropic_events(TOOL, upto=6), anthropic_error_event(kind, f"bad x-api-key {KEY}")]
    server = FakeServer(sse(cut))
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server))
    assert (raised.value.retryable, raised.value.context["kind"]) == (False, expected)
    assert KEY not in str(raised.value.to_json())
    assert len(server.requests) == 1


async def test_a_rejected_key_before_the_stream_is_final_and_never_shown() -> None:
    server = FakeServer(anthropic_error(401, "authentication_error", f"invalid x-api-key {KEY}"))
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server))
    assert (raised.value.retryable, raised.value.context["kind"]) == (False, "authentication")
    assert "ANTHROPIC_API_KEY" in raised.value.message
    assert KEY not in str(raised.value.to_json())


async def test_a_spend_limit_error_event_is_final() -> None:
    limit = (
        "error",
        {
            "type": "error",
            "error": {
                "type": "rate_limit_error",
                "message": "You have reached your organization's monthly usage limit.",
                "details": {"error_code": "enforced_spend_limit_reached"},
            },
        },
    )
    server = FakeServer(lambda _: sse([*anthropic_events(TOOL, upto=4), limit]))
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server))
    assert (raised.value.retryable, raised.value.context["kind"]) == (False, "quota")
    assert len(server.requests) == 1


async def test_malformed_tool_json_is_answered_without_output_for_the_repair() -> None:
    # The model's tool input is not JSON: like complete (and the other gateways), the answer
    # has no output and the kernel's one repair runs; nothing is retried.
    events = anthropic_events([anthropic_tool_block("interpret", {})], upto=4)
    bad = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": '{"intentions": ]'},
    }
    rest = anthropic_events([anthropic_tool_block("interpret", {})])[5:]
    server = FakeServer(lambda _: sse([*events, ("content_block_delta", bad), *rest]))
    deltas, final = await collect(gateway(server))
    assert final.output is None
    assert final.refusal is None
    assert final.provider == "anthropic" and final.model == "claude-sonnet-4-5-20250929"
    assert final.usage["input_tokens"] == 100
    assert not any(d.restarted for d in deltas)
    assert len(server.requests) == 1


async def test_a_200_page_instead_of_the_stream_names_its_content_type() -> None:
    page = httpx2.Response(
        200, content=b"<html>Sign in</html>", headers={"content-type": "text/html"}
    )
    server = FakeServer(page, anthropic_stream(TOOL))
    _, final = await collect(gateway(server))
    assert final.output == VALUE
    assert len(server.requests) == 2

    server = FakeServer(page)
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server))
    assert raised.value.retryable is True
    assert "text/html" in raised.value.message
    assert len(server.requests) == 4
