"""``OpenAIGateway.stream`` through the real ``openai`` SDK, served server-sent events by an
in-process fake server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
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
from intention_kernel.kernel._pipeline.state import Composition
from intention_kernel.models import OpenAIGateway

from .fakes import (
    Clock,
    EventStream,
    FakeServer,
    openai_body,
    openai_chunks,
    openai_error,
    openai_stream,
    policy,
    sse,
)

COMPOSE = Composition.model_json_schema()
KEY = "sk-test-0123456789abcdef"
ANSWER = json.dumps({"text": "Breakfast is included, from 7 to 10.", "citations": ["ev-1"]})


def gateway(server: FakeServer, clock: Clock | None = None, **kw: Any) -> OpenAIGateway:
    return OpenAIGateway(
        "gpt-4.1-mini",
        api_key=KEY,
        http_client=server.client(),
        retry=policy(clock or Clock(), **kw),
    )


def compose() -> ModelRequest:
    return ModelRequest(
        task="compose",
        system="Help travellers.",
        input={"text": "breakfast?", "outcomes": []},
        output_schema=COMPOSE,
    )


async def collect(
    gw: OpenAIGateway, request: ModelRequest | None = None
) -> tuple[list[ModelOutputDelta], ModelResponse]:
    """The deltas and the final response; checks that the response comes once, last."""
    items = [item async for item in gw.stream(request or compose())]
    *deltas, final = items
    assert isinstance(final, ModelResponse)
    assert all(isinstance(d, ModelOutputDelta) for d in deltas)
    return [d for d in deltas if isinstance(d, ModelOutputDelta)], final


def text(deltas: list[ModelOutputDelta]) -> str:
    """What a consumer shows: the deltas since the last restart."""
    shown = ""
    for delta in deltas:
        shown = delta.text if delta.restarted else shown + delta.text
    return shown


def test_the_gateway_streams() -> None:
    gw = OpenAIGateway("gpt-4.1-mini", api_key=KEY, http_client=FakeServer().client())
    assert isinstance(gw, StreamingModelGateway)


async def test_deltas_are_the_content_and_the_request_asks_to_stream_with_usage() -> None:
    server = FakeServer(openai_stream(ANSWER))
    deltas, final = await collect(gateway(server))
    assert len(deltas) > 3 and not any(d.restarted for d in deltas)
    assert "".join(d.text for d in deltas) == ANSWER
    assert final.output == json.loads(ANSWER)
    assert (final.model, final.provider, final.finish_reason) == (
        "gpt-4.1-mini-2025-04-14",
        "openai",
        "stop",
    )
    assert final.usage == {"input_tokens": 120, "output_tokens": 30}
    body = server.body()
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["response_format"]["json_schema"]["name"] == "compose"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert server.requests[0].headers["x-stainless-retry-count"] == "0"


@pytest.mark.parametrize(
    ("content", "options"),
    [
        (ANSWER, {}),
        (json.dumps({"text": "ok", "citations": None}), {}),  # the null optional is dropped
        ('{"text": "unfinished', {}),  # not JSON: the repair path
        (json.dumps({"text": "Booked: Alf"}), {"finish": "length"}),  # cut off: never used
        (None, {"refusal": "I can't help with that."}),
        (None, {"finish": "content_filter"}),
        (json.dumps({"text": "ok"}), {"usage": (7, 3), "model": "gpt-4.1-2025-04-14"}),
    ],
)
async def test_the_final_response_is_the_one_complete_gives(
    content: str | None, options: dict[str, Any]
) -> None:
    whole = await gateway(FakeServer(openai_body(content, **options))).complete(compose())
    deltas, final = await collect(gateway(FakeServer(openai_stream(content, **options))))
    assert final == whole
    assert "".join(d.text for d in deltas) == (content or "")


async def test_a_refusal_is_never_streamed() -> None:
    server = FakeServer(openai_stream(None, refusal="I can't help with that."))
    deltas, final = await collect(gateway(server))
    assert deltas == []
    assert final.refusal == ModelRefusal(kind="refusal", message="I can't help with that.")
    assert (final.output, final.finish_reason) == (None, "refusal")


async def test_a_cut_off_answer_streams_but_is_never_used() -> None:
    server = FakeServer(openai_stream('{"text": "Booked: Al', finish="length"))
    deltas, final = await collect(gateway(server))
    assert text(deltas) == '{"text": "Booked: Al'
    assert (final.output, final.finish_reason) == (None, "length")
    assert final.usage == {"input_tokens": 120, "output_tokens": 30}


async def test_a_retryable_error_before_the_first_delta_is_retried_like_complete() -> None:
    clock = Clock()
    server = FakeServer(
        openai_error(429, "Rate limit reached", "requests", "rate_limit_exceeded", retry_after="3"),
        openai_error(503, "overloaded", "server_error"),
        openai_stream(ANSWER),
    )
    deltas, final = await collect(gateway(server, clock))
    assert not any(d.restarted for d in deltas)  # nothing was shown before the retries
    assert "".join(d.text for d in deltas) == ANSWER
    assert final.output == json.loads(ANSWER)
    assert clock.waits == [3.0, 1.0]
    assert len(server.requests) == 3


async def test_a_connection_lost_mid_stream_restarts_the_deltas() -> None:
    clock = Clock()
    server = FakeServer(
        sse(openai_chunks(ANSWER, upto=4), fail=httpx2.ReadError), openai_stream(ANSWER)
    )
    deltas, final = await collect(gateway(server, clock))
    restarts = [i for i, d in enumerate(deltas) if d.restarted]
    assert restarts == [3]  # three pieces of the first attempt, then the restart marker
    assert deltas[3] == ModelOutputDelta(text="", restarted=True)
    assert "".join(d.text for d in deltas[:3]) == ANSWER[:21]
    assert text(deltas) == ANSWER
    assert final.output == json.loads(ANSWER)
    assert clock.waits == [0.5]


async def test_an_error_event_mid_stream_is_classified_like_a_status() -> None:
    error = {"error": {"message": "The server had an error", "type": "server_error", "code": None}}
    cut = [*openai_chunks(ANSWER, upto=3), (None, error)]
    clock = Clock()
    server = FakeServer(sse(cut), openai_stream(ANSWER))
    deltas, final = await collect(gateway(server, clock))
    assert [d.restarted for d in deltas].count(True) == 1
    assert final.output == json.loads(ANSWER)

    server = FakeServer(lambda _: sse(cut))  # a new body each time: a stream is read once
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server, Clock()))
    assert (raised.value.retryable, raised.value.context["kind"]) == (True, "server")
    assert raised.value.context["attempts"] == 4
    assert len(server.requests) == 4


async def test_a_stream_that_ends_without_a_finish_reason_is_a_lost_connection() -> None:
    # No finish reason, no [DONE]: the JSON so far may parse yet be only part of the answer.
    server = FakeServer(sse(openai_chunks('{"text": "ok"}', upto=3)), openai_stream(ANSWER))
    deltas, final = await collect(gateway(server))
    assert [d.restarted for d in deltas].count(True) == 1
    assert final.output == json.loads(ANSWER)

    server = FakeServer(lambda _: sse(openai_chunks('{"text": "ok"}', upto=3)))
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server))
    assert raised.value.context["kind"] == "connection"


async def test_a_stream_that_stalls_times_out_and_is_retried() -> None:
    stalled = sse(openai_chunks(ANSWER, upto=3), stall=3600.0)  # a server that stops writing
    server = FakeServer(stalled, openai_stream(ANSWER))
    async with asyncio.timeout(10):
        deltas, final = await collect(gateway(server, attempt_timeout=0.2))
    assert [d.restarted for d in deltas].count(True) == 1
    assert final.output == json.loads(ANSWER)

    server = FakeServer(sse(openai_chunks(ANSWER, upto=3), stall=3600.0))
    with pytest.raises(ModelGatewayError) as raised:
        async with asyncio.timeout(10):
            await collect(gateway(server, attempts=1, attempt_timeout=0.2))
    assert (raised.value.retryable, raised.value.context["kind"]) == (True, "timeout")


async def test_a_final_error_mid_stream_is_not_retried_and_never_shows_the_key() -> None:
    error = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    server = FakeServer(sse([*openai_chunks(ANSWER, upto=3), (None, error)]))
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server))
    assert (raised.value.retryable, raised.value.context["kind"]) == (False, "authentication")
    assert KEY not in str(raised.value.to_json())
    assert len(server.requests) == 1


async def test_a_rejected_key_before_the_stream_is_final_and_never_shown() -> None:
    server = FakeServer(
        openai_error(
            401, f"Incorrect API key provided: {KEY}.", "invalid_request_error", "invalid_api_key"
        )
    )
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server))
    assert (raised.value.retryable, raised.value.context["kind"]) == (False, "authentication")
    assert "OPENAI_API_KEY" in raised.value.message
    assert KEY not in str(raised.value.to_json())
    assert len(server.requests) == 1


async def test_retries_that_run_out_raise_a_retryable_error() -> None:
    clock = Clock()
    server = FakeServer(lambda _: sse(openai_chunks(ANSWER, upto=3), fail=httpx2.ReadError))
    items: list[Any] = []

    async def read() -> None:
        async for item in gateway(server, clock).stream(compose()):
            items.append(item)

    with pytest.raises(ModelGatewayError) as raised:
        await read()
    assert (raised.value.retryable, raised.value.context["kind"]) == (True, "connection")
    assert raised.value.context["attempts"] == 4
    assert clock.waits == [0.5, 1.0, 2.0]
    assert [i.restarted for i in items].count(True) == 3
    assert not any(isinstance(i, ModelResponse) for i in items)


async def test_a_consumer_that_stops_early_closes_the_response() -> None:
    response = sse(openai_chunks(ANSWER), stall=3600.0)
    body = response.stream
    assert isinstance(body, EventStream)
    stream = gateway(FakeServer(response)).stream(compose())
    assert isinstance(stream, AsyncGenerator)
    first = await anext(stream)
    assert isinstance(first, ModelOutputDelta) and first.text
    await stream.aclose()
    assert body.closed


async def test_a_spend_limit_error_event_is_final() -> None:
    error = {
        "error": {
            "message": "You exceeded your current quota, please check your plan.",
            "type": "insufficient_quota",
            "code": "project_spend_limit_exceeded",
        }
    }
    server = FakeServer(lambda _: sse([*openai_chunks(ANSWER, upto=2), (None, error)]))
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server))
    assert (raised.value.retryable, raised.value.context["kind"]) == (False, "quota")
    assert len(server.requests) == 1


async def test_a_200_page_instead_of_the_stream_names_its_content_type() -> None:
    page = httpx2.Response(
        200, content=b"<html>Sign in</html>", headers={"content-type": "text/html"}
    )
    server = FakeServer(page, openai_stream(ANSWER))
    _, final = await collect(gateway(server))
    assert final.output == json.loads(ANSWER)
    assert len(server.requests) == 2

    server = FakeServer(page)
    with pytest.raises(ModelGatewayError) as raised:
        await collect(gateway(server))
    assert raised.value.retryable is True
    assert "text/html" in raised.value.message
    assert len(server.requests) == 4
