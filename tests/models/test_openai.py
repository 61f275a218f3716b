"""``OpenAIGateway`` through the real ``openai`` SDK, served by an in-process fake server."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from intention_kernel.contracts.errors import ModelGatewayError
from intention_kernel.contracts.gateway import ModelRefusal, ModelRequest
from intention_kernel.kernel._pipeline.state import Composition, Interpretation
from intention_kernel.models import OpenAIGateway

from .fakes import Clock, FakeServer, openai_body, openai_error, openai_json, policy, raises

COMPOSE = Composition.model_json_schema()
INTERPRET = Interpretation.model_json_schema()
KEY = "sk-test-0123456789abcdef"


def gateway(server: FakeServer, clock: Clock | None = None, **kw: Any) -> OpenAIGateway:
    return OpenAIGateway(
        "gpt-4.1-mini",
        api_key=KEY,
        http_client=server.client(),
        retry=policy(clock or Clock()),
        **kw,
    )


def compose(**kw: Any) -> ModelRequest:
    return ModelRequest(
        task="compose",
        system="Help travellers.",
        input={"text": "hello", "outcomes": []},
        output_schema=COMPOSE,
        **kw,
    )


async def test_the_request_is_a_strict_json_schema_chat_completion() -> None:
    server = FakeServer(openai_json({"text": "Hi!", "citations": ["ev-1"]}))
    response = await gateway(server).complete(compose())
    [request] = server.requests
    assert request.url == "https://api.openai.com/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["x-stainless-retry-count"] == "0"  # the SDK's own retries are off
    body = server.body()
    assert body["model"] == "gpt-4.1-mini"
    system, user = body["messages"]
    assert system["role"] == "system"
    assert system["content"].startswith("Help travellers.\n\nWrite the reply")
    assert user == {"role": "user", "content": '{"text":"hello","outcomes":[]}'}
    answer_format = body["response_format"]
    assert answer_format["type"] == "json_schema"
    assert answer_format["json_schema"]["name"] == "compose"
    assert answer_format["json_schema"]["strict"] is True
    schema = answer_format["json_schema"]["schema"]
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["text", "citations"]
    assert "max_completion_tokens" not in body and "temperature" not in body
    assert response.output == {"text": "Hi!", "citations": ["ev-1"]}
    assert response.model == "gpt-4.1-mini-2025-04-14"
    assert response.provider == "openai"
    assert response.finish_reason == "stop"
    assert response.usage == {"input_tokens": 120, "output_tokens": 30}
    assert response.refusal is None


async def test_a_null_for_an_omitted_optional_property_is_dropped() -> None:
    server = FakeServer(openai_json({"text": "Hi!", "citations": None}))
    response = await gateway(server).complete(compose())
    assert response.output == {"text": "Hi!"}  # the kernel's default (no citations) applies


async def test_a_schema_strict_mode_cannot_express_is_sent_as_a_guide() -> None:
    answer = {"intentions": [{"capability": "desk.faq", "input": {"topic": "breakfast"}}]}
    server = FakeServer(openai_json(answer))
    response = await gateway(server).complete(
        ModelRequest(task="interpret", input={"text": "breakfast?"}, output_schema=INTERPRET)
    )
    sent = server.body()["response_format"]["json_schema"]
    assert sent["name"] == "interpret"
    assert sent["strict"] is False  # capability inputs are free-form objects here
    assert sent["schema"] == INTERPRET
    assert response.output == answer


async def test_options_and_the_requested_model() -> None:
    server = FakeServer(openai_json({"text": "ok"}))
    gw = gateway(server, max_tokens=500, temperature=0.2)
    await gw.complete(compose(model="openai:gpt-4.1"))
    body = server.body()
    assert body["model"] == "gpt-4.1"
    assert body["max_completion_tokens"] == 500
    assert body["temperature"] == 0.2
    with pytest.raises(ModelGatewayError) as raised:
        await gw.complete(compose(model="anthropic:claude-sonnet-4-5"))
    assert raised.value.retryable is False
    assert len(server.requests) == 1


async def test_an_openai_compatible_server_by_base_url() -> None:
    server = FakeServer(openai_json({"text": "ok"}, model="qwen3:8b"))
    gw = OpenAIGateway(
        "qwen3:8b",
        base_url="http://localhost:11434/v1",
        api_key="ollama",
        provider="ollama",
        max_tokens=256,
        http_client=server.client(),
    )
    response = await gw.complete(compose())
    assert server.requests[0].url == "http://localhost:11434/v1/chat/completions"
    assert server.body()["model"] == "qwen3:8b"  # a colon inside a model name is kept
    assert server.body()["max_tokens"] == 256
    assert (response.provider, response.model) == ("ollama", "qwen3:8b")


async def test_a_rate_limit_waits_as_long_as_retry_after_asks() -> None:
    clock = Clock()
    server = FakeServer(
        openai_error(429, "Rate limit reached", "requests", "rate_limit_exceeded", retry_after="7"),
        openai_json({"text": "ok"}),
    )
    response = await gateway(server, clock).complete(compose())
    assert response.output == {"text": "ok"}
    assert len(server.requests) == 2
    assert clock.waits == [7.0]


async def test_retry_after_ms_is_read_too() -> None:
    clock = Clock()
    server = FakeServer(
        openai_error(429, "slow down", "requests", retry_after_ms="1500"),
        openai_json({"text": "ok"}),
    )
    await gateway(server, clock).complete(compose())
    assert clock.waits == [1.5]


async def test_server_errors_back_off_exponentially_then_succeed() -> None:
    clock = Clock()
    server = FakeServer(
        openai_error(500, "The server had an error", "server_error"),
        openai_error(502, "Bad gateway", "server_error"),
        openai_json({"text": "ok"}),
    )
    await gateway(server, clock).complete(compose())
    assert clock.waits == [0.5, 1.0]


async def test_overload_that_lasts_is_a_retryable_error_after_bounded_attempts() -> None:
    clock = Clock()
    server = FakeServer(openai_error(503, "overloaded", "server_error"))
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server, clock).complete(compose())
    error = raised.value
    assert error.retryable is True
    assert error.context["kind"] == "overloaded"
    assert error.context["attempts"] == 4
    assert error.context["status"] == 503
    assert len(server.requests) == 4
    assert clock.waits == [0.5, 1.0, 2.0]


async def test_a_wait_past_the_deadline_is_not_made() -> None:
    clock = Clock()
    server = FakeServer(openai_error(429, "Rate limit", "requests", retry_after="600"))
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server, clock).complete(compose())
    assert "deadline" in raised.value.message
    assert raised.value.retryable is True
    assert raised.value.context["retry_after"] == 600.0
    assert len(server.requests) == 1 and clock.waits == []


@pytest.mark.parametrize(
    ("failure", "kind"),
    [(httpx2.ReadTimeout, "timeout"), (httpx2.ConnectError, "connection")],
)
async def test_timeouts_and_lost_connections_are_retried(
    failure: type[httpx2.TransportError], kind: str
) -> None:
    clock = Clock()
    server = FakeServer(raises(failure), openai_json({"text": "ok"}))
    assert (await gateway(server, clock).complete(compose())).output == {"text": "ok"}
    server = FakeServer(raises(failure))
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server, clock).complete(compose())
    assert raised.value.context["kind"] == kind
    assert raised.value.retryable is True


async def test_a_rejected_key_is_final_and_never_shown() -> None:
    server = FakeServer(
        openai_error(
            401, f"Incorrect API key provided: {KEY}.", "invalid_request_error", "invalid_api_key"
        )
    )
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server).complete(compose())
    error = raised.value
    assert error.retryable is False
    assert error.context["kind"] == "authentication"
    assert "OPENAI_API_KEY" in error.message
    assert KEY not in str(error.to_json())
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (400, "bad_request", None),
        (403, "permission", None),
        (404, "not_found", "model_not_found"),
        (422, "bad_request", None),
        (429, "quota", "insufficient_quota"),
    ],
)
async def test_requests_that_cannot_succeed_are_not_retried(
    status: int, kind: str, code: str | None
) -> None:
    detail = f"Invalid schema for response_format 'compose' (key {KEY})"
    server = FakeServer(openai_error(status, detail, "invalid_request_error", code))
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server).complete(compose())
    error = raised.value
    assert (error.retryable, error.context["kind"], error.context["status"]) == (
        False,
        kind,
        status,
    )
    assert len(server.requests) == 1
    assert KEY not in error.message
    if kind == "bad_request":
        assert "Invalid schema for response_format" in error.message


async def test_an_answer_that_is_not_json_goes_to_the_repair_path() -> None:
    server = FakeServer(openai_body('{"text": "unfinished'))
    response = await gateway(server).complete(compose())
    assert response.output is None
    assert response.finish_reason == "stop"


async def test_a_response_body_that_is_not_json_is_a_retryable_failure() -> None:
    broken = httpx2.Response(
        200, content=b"<html>proxy</html>", headers={"content-type": "application/json"}
    )
    server = FakeServer(broken, openai_json({"text": "ok"}))
    assert (await gateway(server).complete(compose())).output == {"text": "ok"}
    assert len(server.requests) == 2


async def test_a_refusal_is_its_own_outcome() -> None:
    server = FakeServer(openai_body(None, refusal="I can't help with that."))
    response = await gateway(server).complete(compose())
    assert response.output is None
    assert response.finish_reason == "refusal"
    assert response.refusal == ModelRefusal(kind="refusal", message="I can't help with that.")


async def test_a_content_filter_stop_is_its_own_outcome() -> None:
    server = FakeServer(openai_body(None, finish="content_filter"))
    response = await gateway(server).complete(compose())
    assert response.refusal == ModelRefusal(kind="content_filter")
    assert response.output is None


async def test_truncated_output_is_never_used() -> None:
    # Even a truncated answer that happens to parse may have lost part of what was meant.
    server = FakeServer(openai_json({"text": "Booked: Alf"}, finish="length"))
    response = await gateway(server).complete(compose())
    assert response.output is None
    assert response.finish_reason == "length"
    assert response.usage == {"input_tokens": 120, "output_tokens": 30}


QUOTA = "You exceeded your current quota, please check your plan and billing details."


@pytest.mark.parametrize(
    "code",
    [
        "insufficient_quota",
        "credit_balance_exhausted",
        "organization_spend_limit_exceeded",
        "project_spend_limit_exceeded",
        "organization_usage_limit_exceeded",
    ],
)
async def test_a_spent_account_429_is_final_after_one_call(code: str) -> None:
    # Billing 429s share the type insufficient_quota; the code names the cause. Retrying does
    # not restore access until credit is added or a limit raised.
    clock = Clock()
    server = FakeServer(openai_error(429, QUOTA, "insufficient_quota", code), openai_json({}))
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server, clock).complete(compose())
    error = raised.value
    assert (error.retryable, error.context["kind"], error.context["status"]) == (
        False,
        "quota",
        429,
    )
    assert error.context["attempts"] == 1
    assert code in error.message
    assert len(server.requests) == 1 and clock.waits == []


async def test_a_rate_limit_429_is_still_retried() -> None:
    clock = Clock()
    limited = openai_error(429, "Rate limit reached", "requests", "rate_limit_exceeded")
    server = FakeServer(limited, openai_json({"text": "ok"}))
    assert (await gateway(server, clock).complete(compose())).output == {"text": "ok"}
    assert len(server.requests) == 2


@pytest.mark.parametrize("content_type", ["text/html; charset=utf-8", "text/plain"])
async def test_a_200_page_that_is_not_the_api_is_a_retryable_gateway_error(
    content_type: str,
) -> None:
    # A captive portal, a proxy's login page or a base_url that points at a web site.
    page = httpx2.Response(
        200, content=b"<html><body>Sign in</body></html>", headers={"content-type": content_type}
    )
    server = FakeServer(page)
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server).complete(compose())
    error = raised.value
    assert error.retryable is True
    assert error.context["kind"] == "server"
    assert content_type in error.message
    assert len(server.requests) == 4  # the policy's attempts: a portal may let the next one by

    server = FakeServer(page, openai_json({"text": "ok"}))
    assert (await gateway(server).complete(compose())).output == {"text": "ok"}
