"""A body that arrives one byte at a time, from a real server on a loopback socket, through
each gateway's real SDK: the SDKs' timeouts bound each read, so only the gateways' own
wall-clock bound on every attempt and on the whole call ends it at the deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.providers.google import GoogleProvider

from intention_kernel.contracts.errors import ModelGatewayError
from intention_kernel.contracts.gateway import ModelGateway, ModelRequest
from intention_kernel.kernel._pipeline.state import Composition
from intention_kernel.models import AnthropicGateway, OpenAIGateway, PydanticAIGateway, RetryPolicy

from .fakes import TrickleServer, anthropic_tool, gemini_call, openai_json

ANSWER = {"text": "Your room at the Alfama Inn is booked for two nights.", "citations": []}
# deadline=2, attempt_timeout=1: the first attempt is cut at 1 s, the second (after a 0.1 s
# backoff) at the deadline; no time is left for a third. The body alone would take 10 s or more.
POLICY = RetryPolicy(deadline=2.0, attempt_timeout=1.0, base_delay=0.1, jitter=lambda: 1.0)


def compose() -> ModelRequest:
    return ModelRequest(
        task="compose",
        input={"text": "book it", "outcomes": []},
        output_schema=Composition.model_json_schema(),
    )


def openai(url: str) -> ModelGateway:
    return OpenAIGateway("gpt-4.1-mini", api_key="sk-test-0123456789", base_url=url, retry=POLICY)


def anthropic(url: str) -> ModelGateway:
    return AnthropicGateway(
        "claude-sonnet-4-5", api_key="sk-ant-test-0123456789", base_url=url, retry=POLICY
    )


def pydantic_ai(url: str) -> ModelGateway:
    provider = GoogleProvider(api_key="AIzaSyTest0123456789abcdef", base_url=url)
    return PydanticAIGateway(GoogleModel("gemini-3.5-flash-lite", provider=provider), retry=POLICY)


CASES: dict[str, tuple[Callable[[str], ModelGateway], bytes]] = {
    "openai": (openai, openai_json(ANSWER).content),
    "anthropic": (anthropic, anthropic_tool("compose", ANSWER).content),
    "pydantic-ai": (pydantic_ai, gemini_call("compose", ANSWER).content),
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_a_body_sent_a_byte_at_a_time_ends_at_the_deadline(name: str) -> None:
    build, body = CASES[name]
    assert len(body) * 0.03 > 10  # the whole body would take longer than 10 s
    async with TrickleServer(body, pause=0.03) as server:
        gateway = build(server.url)
        started = time.monotonic()
        with pytest.raises(ModelGatewayError) as raised:
            await gateway.complete(compose())
        elapsed = time.monotonic() - started
    error = raised.value
    assert error.retryable is True
    assert error.context["kind"] == "timeout"
    assert error.context["attempts"] == 2
    assert server.requests == 2
    assert elapsed < 4.0, f"took {elapsed:.1f} s with deadline=2"


async def test_a_caller_cancelling_a_slow_call_is_cancelled_not_timed_out() -> None:
    async with TrickleServer(openai_json(ANSWER).content, pause=0.03) as server:
        call = asyncio.ensure_future(openai(server.url).complete(compose()))
        await server.answering.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    assert server.requests == 1  # cancelled, not retried
