"""``AnthropicGateway`` through the real ``anthropic`` SDK, served by an in-process fake server."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from intention_kernel.contracts.errors import ModelGatewayError
from intention_kernel.contracts.gateway import ModelRefusal, ModelRequest
from intention_kernel.kernel._pipeline.state import Composition, Interpretation
from intention_kernel.models import AnthropicGateway

from .fakes import (
    Clock,
    FakeServer,
    anthropic_body,
    anthropic_error,
    anthropic_tool,
    policy,
    raises,
)

COMPOSE = Composition.model_json_schema()
INTERPRET = Interpretation.model_json_schema()
KEY = "sk-ant-api03-test0123456789"


def gateway(server: FakeServer, clock: Clock | None = None, **kw: Any) -> AnthropicGateway:
    return AnthropicGateway(
        "claude-sonnet-4-5",
        api_key=KEY,
        http_client=server.client(),
        retry=policy(clock or Clock()),
        **kw,
    )


def interpret(**kw: Any) -> ModelRequest:
    return ModelRequest(
        task="interpret",
        system="Help travellers.",
        input={"text": "Is breakfast included?", "capabilities": []},
        output_schema=INTERPRET,
        **kw,
    )


async def test_the_answer_is_a_forced_tool_call_with_the_request_schema() -> None:
    answer = {"intentions": [{"capability": "desk.faq", "input": {"topic": "breakfast"}}]}
    server = FakeServer(anthropic_tool("interpret", answer, usage=(100, 40, 10, 50)))
    response = await gateway(server).complete(interpret())
    [request] = server.requests
    assert request.url == "https://api.anthropic.com/v1/messages"
    assert request.headers["authorization"] == f"Bearer {KEY}"  # this SDK's key header
    assert request.headers["anthropic-version"]
    assert request.headers["x-stainless-retry-count"] == "0"
    body = server.body()
    assert body["model"] == "claude-sonnet-4-5"
    assert body["max_tokens"] == 4096
    assert body["system"].startswith("Help travellers.\n\nRead the user's message")
    assert body["messages"] == [
        {"role": "user", "content": '{"text":"Is breakfast included?","capabilities":[]}'}
    ]
    [tool] = body["tools"]
    assert tool["name"] == "interpret"
    assert tool["input_schema"] == INTERPRET
    assert body["tool_choice"] == {"type": "tool", "name": "interpret"}
    assert response.output == answer
    assert response.model == "claude-sonnet-4-5-20250929"
    assert (response.provider, response.finish_reason) == ("anthropic", "stop")
    # Input tokens count cache writes and reads too.
    assert response.usage == {"input_tokens": 160, "output_tokens": 40}


async def test_options_and_the_requested_model() -> None:
    server = FakeServer(anthropic_tool("compose", {"text": "ok"}))
    gw = gateway(server, max_tokens=800)
    response = await gw.complete(
        ModelRequest(task="compose", model="anthropic:claude-haiku-4-5", output_schema=COMPOSE)
    )
    body = server.body()
    assert (body["model"], body["max_tokens"]) == ("claude-haiku-4-5", 800)
    assert body["system"].startswith("Write the reply")  # no agent instructions: the guide
    assert response.output == {"text": "ok"}


async def test_a_null_for_an_omitted_optional_property_is_dropped() -> None:
    server = FakeServer(anthropic_tool("compose", {"text": "ok", "citations": None}))
    response = await gateway(server).complete(ModelRequest(task="compose", output_schema=COMPOSE))
    assert response.output == {"text": "ok"}


async def test_overloaded_529_is_retried_with_backoff() -> None:
    clock = Clock()
    server = FakeServer(
        anthropic_error(529, "overloaded_error", "Overloaded"),
        anthropic_error(529, "overloaded_error", "Overloaded"),
        anthropic_tool("interpret", {"intentions": []}),
    )
    response = await gateway(server, clock).complete(interpret())
    assert response.output == {"intentions": []}
    assert clock.waits == [0.5, 1.0]


async def test_a_rate_limit_honours_retry_after() -> None:
    clock = Clock()
    server = FakeServer(
        anthropic_error(
            429, "rate_limit_error", "Number of request tokens exceeded", retry_after="12"
        ),
        anthropic_tool("interpret", {"intentions": []}),
    )
    await gateway(server, clock).complete(interpret())
    assert clock.waits == [12.0]


async def test_server_errors_and_timeouts_give_up_after_the_attempts() -> None:
    clock = Clock()
    server = FakeServer(
        anthropic_error(500, "api_error", "Internal server error"),
        raises(httpx2.ReadTimeout),
    )
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server, clock).complete(interpret())
    assert raised.value.retryable is True
    assert raised.value.context["kind"] == "timeout"
    assert raised.value.context["attempts"] == 4
    assert len(server.requests) == 4


async def test_a_rejected_key_is_final_and_never_shown() -> None:
    server = FakeServer(anthropic_error(401, "authentication_error", f"invalid x-api-key {KEY}"))
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server).complete(interpret())
    assert raised.value.retryable is False
    assert raised.value.context["kind"] == "authentication"
    assert "ANTHROPIC_API_KEY" in raised.value.message
    assert KEY not in str(raised.value.to_json())
    assert len(server.requests) == 1


async def test_a_bad_request_says_what_is_wrong() -> None:
    server = FakeServer(
        anthropic_error(
            400, "invalid_request_error", "tools.0.input_schema: JSON schema is invalid"
        )
    )
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server).complete(interpret())
    assert raised.value.retryable is False
    assert raised.value.context["kind"] == "bad_request"
    assert "tools.0.input_schema: JSON schema is invalid" in raised.value.message


async def test_a_refusal_is_its_own_outcome() -> None:
    server = FakeServer(
        anthropic_body([{"type": "text", "text": "I won't do that."}], stop="refusal")
    )
    response = await gateway(server).complete(interpret())
    assert response.output is None
    assert response.finish_reason == "refusal"
    assert response.refusal == ModelRefusal(kind="refusal", message="I won't do that.")


async def test_truncated_output_is_never_used() -> None:
    server = FakeServer(anthropic_tool("interpret", {"intentions": []}, stop="max_tokens"))
    response = await gateway(server).complete(interpret())
    assert (response.output, response.finish_reason) == (None, "length")


async def test_an_answer_without_the_tool_call_goes_to_the_repair_path() -> None:
    server = FakeServer(anthropic_body([{"type": "text", "text": "{oops"}], stop="end_turn"))
    response = await gateway(server).complete(interpret())
    assert (response.output, response.finish_reason) == (None, "stop")


def spend_limit(code: str) -> httpx2.Response:
    """A 429 whose ``error.details.error_code`` says the organization cannot spend more."""
    body = {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": "You have reached your organization's monthly usage limit.",
            "details": {"error_code": code},
        },
    }
    return httpx2.Response(429, json=body)


@pytest.mark.parametrize("code", ["enforced_spend_limit_reached", "contract_spend_limit_reached"])
async def test_a_spend_limit_429_is_final_after_one_call(code: str) -> None:
    clock = Clock()
    server = FakeServer(spend_limit(code), anthropic_tool("interpret", {"intentions": []}))
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server, clock).complete(interpret())
    error = raised.value
    assert (error.retryable, error.context["kind"], error.context["status"]) == (
        False,
        "quota",
        429,
    )
    assert error.context["attempts"] == 1 and code in error.message
    assert len(server.requests) == 1 and clock.waits == []


async def test_a_billing_error_is_final_after_one_call() -> None:
    server = FakeServer(anthropic_error(402, "billing_error", "Your credit balance is too low."))
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server).complete(interpret())
    assert (raised.value.retryable, raised.value.context["kind"]) == (False, "quota")
    assert len(server.requests) == 1


async def test_a_200_page_that_is_not_the_api_is_a_retryable_gateway_error() -> None:
    page = httpx2.Response(
        200, content=b"<html><body>Sign in</body></html>", headers={"content-type": "text/html"}
    )
    server = FakeServer(page)
    with pytest.raises(ModelGatewayError) as raised:
        await gateway(server).complete(interpret())
    assert raised.value.retryable is True
    assert raised.value.context["kind"] == "server"
    assert "text/html" in raised.value.message
    assert len(server.requests) == 4

    server = FakeServer(page, anthropic_tool("interpret", {"intentions": []}))
    assert (await gateway(server).complete(interpret())).output == {"intentions": []}
