"""``PydanticAIGateway`` through Pydantic AI's Gemini model and the real ``google-genai`` SDK,
served by an in-process fake of the Gemini API."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.providers.google import GoogleProvider

from intention_kernel.contracts.errors import ModelGatewayError
from intention_kernel.contracts.gateway import ModelRefusal, ModelRequest
from intention_kernel.kernel._pipeline.state import Composition, Interpretation
from intention_kernel.models import PydanticAIGateway

from .fakes import (
    Clock,
    FakeServer,
    gemini_body,
    gemini_call,
    gemini_error,
    policy,
    raises,
)

COMPOSE = Composition.model_json_schema()
INTERPRET = Interpretation.model_json_schema()
KEY = "AIzaSyTest0123456789abcdef"
URL = (
    "https://generativelanguage.googleapis.com/v1beta/models/gemini-3.5-flash-lite:generateContent"
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
        input={"text": "hello", "outcomes": []},
        output_schema=COMPOSE,
    )


async def test_the_answer_is_a_forced_output_function_call() -> None:
    server = FakeServer(gemini_call("compose", {"text": "Hi!", "citations": ["ev-1"]}))
    gw = gateway(server)
    response = await gw.complete(compose())
    [request] = server.requests
    assert str(request.url) == URL
    assert request.headers["x-goog-api-key"] == KEY
    body = server.body()
    assert body["contents"] == [
        {"parts": [{"text": '{"text":"hello","outcomes":[]}'}], "role": "user"}
    ]
    [instructions] = body["systemInstruction"]["parts"]
    assert instructions["text"].startswith("Help travellers.\n\nWrite the reply")
    [tools] = body["tools"]
    [declaration] = tools["functionDeclarations"]
    assert declaration["name"] == "compose"
    sent = declaration["parameters_json_schema"]
    assert sent["required"] == ["text"]
    assert set(sent["properties"]) == {"text", "citations"}
    assert body["toolConfig"]["functionCallingConfig"]["mode"] == "ANY"
    assert response.output == {"text": "Hi!", "citations": ["ev-1"]}
    assert (response.provider, response.model, response.finish_reason) == (
        "google",
        "gemini-3.5-flash-lite",
        "stop",
    )
    assert response.usage == {"input_tokens": 80, "output_tokens": 20}
    assert gw.dialect == "gemini"


async def test_the_interpretation_schema_reaches_gemini() -> None:
    answer = {
        "intentions": [{"capability": "desk.faq", "input": {"topic": "breakfast"}}],
        "answer": None,
        "reply": None,
    }
    server = FakeServer(gemini_call("interpret", answer))
    response = await gateway(server).complete(
        ModelRequest(task="interpret", input={"text": "breakfast?"}, output_schema=INTERPRET)
    )
    [tools] = server.body()["tools"]
    assert tools["functionDeclarations"][0]["name"] == "interpret"
    assert response.output == answer


async def test_native_output_mode_reads_the_json_text() -> None:
    server = FakeServer(gemini_body([{"text": '{"text": "Hi!"}'}]))
    response = await gateway(server, output_mode="native").complete(compose())
    config = server.body()["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert "tools" not in server.body()
    assert response.output == {"text": "Hi!"}


@pytest.mark.parametrize(
    ("failure", "kind", "waits"),
    [
        (
            gemini_error(429, "RESOURCE_EXHAUSTED", "Resource exhausted", retry_after="4"),
            "rate_limit",
            [4.0],
        ),
        (gemini_error(503, "UNAVAILABLE", "The model is overloaded."), "overloaded", [0.5]),
        (gemini_error(500, "INTERNAL", "An internal error has occurred."), "server", [0.5]),
        (raises(httpx2.ReadTimeout), "timeout", [0.5]),
        (raises(httpx2.ConnectError), "connection", [0.5]),
    ],
)
async def test_passing_failures_are_retried(failure: Any, kind: str, waits: list[float]) -> None:
    clock = Clock()
    server = FakeServer(failure, gemini_call("compose", {"text": "ok"}))
    assert (await gateway(server, clock).complete(compose())).output == {"text": "ok"}
    assert clock.waits == waits
    server = FakeServer(failure)
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server, Clock()).complete(compose())
    assert (raised.value.retryable, raised.value.context["kind"]) == (True, kind)
    assert len(server.requests) == 4


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (400, "INVALID_ARGUMENT", "bad_request"),
        (401, "UNAUTHENTICATED", "authentication"),
        (403, "PERMISSION_DENIED", "permission"),
        (404, "NOT_FOUND", "not_found"),
    ],
)
async def test_requests_that_cannot_succeed_are_not_retried(
    status: int, code: str, kind: str
) -> None:
    server = FakeServer(gemini_error(status, code, f"Request is wrong. API key: {KEY}"))
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server).complete(compose())
    assert (raised.value.retryable, raised.value.context["kind"]) == (False, kind)
    assert KEY not in str(raised.value.to_json())
    assert len(server.requests) == 1
    if kind in ("authentication", "permission"):
        assert "GOOGLE_API_KEY" in raised.value.message


async def test_a_safety_stop_is_a_content_filter_outcome() -> None:
    server = FakeServer(gemini_body([], finish="SAFETY"))
    response = await gateway(server).complete(compose())
    assert response.output is None
    assert response.refusal == ModelRefusal(kind="content_filter")


async def test_a_blocked_prompt_is_a_content_filter_outcome() -> None:
    blocked = httpx2.Response(
        200,
        json={
            "candidates": [],
            "promptFeedback": {"blockReason": "SAFETY"},
            "usageMetadata": {"promptTokenCount": 5},
        },
    )
    response = await gateway(FakeServer(blocked)).complete(compose())
    assert response.refusal is not None and response.refusal.kind == "content_filter"


async def test_truncated_output_is_never_used() -> None:
    server = FakeServer(gemini_call("compose", {"text": "Booked: Alf"}, finish="MAX_TOKENS"))
    response = await gateway(server).complete(compose())
    assert (response.output, response.finish_reason) == (None, "length")


async def test_an_answer_that_is_not_json_goes_to_the_repair_path() -> None:
    server = FakeServer(gemini_body([{"text": "{not json"}]))
    response = await gateway(server, output_mode="native").complete(compose())
    assert response.output is None
    assert response.refusal is None


async def test_settings_reach_the_provider() -> None:
    server = FakeServer(gemini_call("compose", {"text": "ok"}))
    await gateway(server, max_tokens=300, temperature=0.1).complete(compose())
    config = server.body()["generationConfig"]
    assert (config["maxOutputTokens"], config["temperature"]) == (300, 0.1)
