"""``PydanticAIGateway.stream`` through Pydantic AI's Gemini model and the real ``google-genai``
SDK, served ``streamGenerateContent`` server-sent events by an in-process fake server."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.providers.google import GoogleProvider

from intention_kernel.contracts.errors import ModelGatewayError
from intention_kernel.contracts.gateway import (
    ModelOutputDelta,
    ModelRefusal,
    ModelRequest,
    ModelResponse,
    StreamingModelGateway,
)
from intention_kernel.kernel._pipeline.state import Composition
from intention_kernel.models import PydanticAIGateway

from .fakes import (
    Clock,
    FakeServer,
    gemini_body,
    gemini_error,
    gemini_stream,
    policy,
    split,
    sse,
)

COMPOSE = Composition.model_json_schema()
KEY = "AIzaSyTest0123456789abcdef"
VALUE = {"text": "Breakfast is included.", "citations": ["ev-1"]}
LENGTH = "MAX_TOKENS"
URL = (
    "https://generativelanguage.googleapis.com/v1beta/models/"
    "gemini-3.5-flash-lite:streamGenerateContent?alt=sse"
)


def gateway(server: FakeServer, clock: Clock | None = None, **kw: Any) -> PydanticAIGateway:
    model = GoogleModel(
        "gemini-3.5-flash-lite", provider=GoogleProvider(api_key=KEY, http_client=server.client())
    )
    return PydanticAIGateway(model, retry=policy(clock or Clock()), key_hint="GOOGLE_API_KEY", **kw)


def compose() -> ModelRequest:
    return ModelRequest(
        task="compose",
        system="Help travellers.",
        input={"text": "breakfast?", "outcomes": []},
        output_schema=COMPOSE,
    )


def chunk(
    parts: list[dict[str, Any]], finish: str | None = None, usage: tuple[int, int] | None = None
) -> dict[str, Any]:
    """One ``GenerateContentResponse`` of a stream; the last carries the finish and usage."""
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    answer: dict[str, Any] = {
        "candidates": [candidate],
        "modelVersion": "gemini-3.5-flash-lite",
        "responseId": "resp-1",
    }
    if usage is not None:
        answer["usageMetadata"] = {
            "promptTokenCount": usage[0],
            "candidatesTokenCount": usage[1],
            "totalTokenCount": sum(usage),
        }
    return answer


def text_chunks(text: str, finish: str = "STOP") -> list[dict[str, Any]]:
    *first, last = split(text)
    return [*(chunk([{"text": p}]) for p in first), chunk([{"text": last}], finish, (80, 20))]


def call_chunks(value: Any, finish: str = "STOP") -> list[dict[str, Any]]:
    return [chunk([{"functionCall": {"name": "compose", "args": value}}], finish, (80, 20))]


async def collect(gw: PydanticAIGateway) -> tuple[list[ModelOutputDelta], ModelResponse]:
    items = [item async for item in gw.stream(compose())]
    *deltas, final = items
    assert isinstance(final, ModelResponse)
    assert all(isinstance(d, ModelOutputDelta) for d in deltas)
    return [d for d in deltas if isinstance(d, ModelOutputDelta)], final


def test_the_gateway_streams() -> None:
    assert isinstance(gateway(FakeServer()), StreamingModelGateway)


async def test_a_function_call_answer_is_one_delta_of_its_arguments() -> None:
    server = FakeServer(gemini_stream(call_chunks(VALUE)))
    deltas, final = await collect(gateway(server))
    assert str(server.requests[0].url) == URL
    assert server.body()["toolConfig"]["functionCallingConfig"]["mode"] == "ANY"
    assert [json.loads(d.text) for d in deltas] == [VALUE]
    assert final.output == VALUE
    assert final.usage == {"input_tokens": 80, "output_tokens": 20}
    assert (final.provider, final.model, final.finish_reason) == (
        "google",
        "gemini-3.5-flash-lite",
        "stop",
    )


async def test_native_output_streams_the_json_text() -> None:
    server = FakeServer(gemini_stream(text_chunks(json.dumps(VALUE))))
    deltas, final = await collect(gateway(server, output_mode="native"))
    assert len(deltas) > 3
    assert "".join(d.text for d in deltas) == json.dumps(VALUE)
    assert final.output == VALUE


@pytest.mark.parametrize(
    ("whole", "streamed", "options"),
    [
        (
            gemini_body([{"functionCall": {"name": "compose", "args": VALUE}}]),
            call_chunks(VALUE),
            {},
        ),
        (
            gemini_body(
                [{"functionCall": {"name": "compose", "args": VALUE}}], finish="MAX_TOKENS"
            ),
            call_chunks(VALUE, LENGTH),
            {},
        ),
        (gemini_body([], finish="SAFETY"), [chunk([], "SAFETY", (80, 20))], {}),
        (
            gemini_body([{"text": json.dumps(VALUE)}]),
            text_chunks(json.dumps(VALUE)),
            {"output_mode": "native"},
        ),
        (
            gemini_body([{"text": "{not json"}]),
            text_chunks("{not json"),
            {"output_mode": "native"},
        ),
    ],
)
async def test_the_final_response_is_the_one_complete_gives(
    whole: httpx2.Response, streamed: list[dict[str, Any]], options: dict[str, Any]
) -> None:
    expected = await gateway(FakeServer(whole), **options).complete(compose())
    _, final = await collect(gateway(FakeServer(gemini_stream(streamed)), **options))
    assert final == expected


async def test_a_safety_stop_is_a_content_filter_outcome() -> None:
    deltas, final = await collect(gateway(FakeServer(gemini_stream([chunk([], "SAFETY")]))))
    assert deltas == []
    assert (final.output, final.refusal) == (None, ModelRefusal(kind="content_filter"))


async def test_an_overload_before_the_first_delta_is_retried_like_complete() -> None:
    clock = Clock()
    server = FakeServer(
        gemini_error(503, "UNAVAILABLE", "The model is overloaded."),
        gemini_stream(call_chunks(VALUE)),
    )
    deltas, final = await collect(gateway(server, clock))
    assert not any(d.restarted for d in deltas)
    assert final.output == VALUE
    assert clock.waits == [0.5]


async def test_a_connection_lost_mid_stream_restarts_the_deltas() -> None:
    text = json.dumps(VALUE)
    server = FakeServer(
        sse([(None, c) for c in text_chunks(text)[:2]], fail=httpx2.ReadError),
        gemini_stream(text_chunks(text)),
    )
    deltas, final = await collect(gateway(server, output_mode="native"))
    assert [i for i, d in enumerate(deltas) if d.restarted] == [2]
    assert "".join(d.text for d in deltas[3:]) == text
    assert final.output == VALUE


async def test_a_rejected_key_is_final_and_never_shown() -> None:
    server = FakeServer(gemini_error(401, "UNAUTHENTICATED", f"API key not valid: {KEY}"))
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server))
    assert (raised.value.retryable, raised.value.context["kind"]) == (False, "authentication")
    assert "GOOGLE_API_KEY" in raised.value.message
    assert KEY not in str(raised.value.to_json())
    assert len(server.requests) == 1
