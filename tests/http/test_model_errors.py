"""A model gateway's failure is answered by what the gateway said: a final one (a rejected key,
a bad request, a used-up quota) is 502 without ``Retry-After``, one that may pass is 503 with
the wait the provider asked for; the provider's text and the configuration hints (the key's
environment variable) go to the service's log, never to the client.

A turn run in the request (``busy="wait"``) is answered by the gateway's error itself. A
submitted turn (the default) is retried by its worker while the failure may pass, so the client
gets the committed answer; a final failure makes the request dead, answered 502 as well."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from intention_kernel.contracts.errors import ModelGatewayError
from intention_kernel.contracts.gateway import ModelRequest
from intention_kernel.examples.travel_desk import scripted_model
from intention_kernel.models import AnthropicGateway, OpenAIGateway

from ..models.fakes import Clock, FakeServer, anthropic_error, openai_error, policy
from .support import SEARCH, Desk, app_for, bearer, events, is_problem, make_desk, serve

PROVIDER_TEXT = "Incorrect API key provided: sk-live-abc...wxyz. You can find your key at"
HINT = "check OPENAI_API_KEY"
LOGGER = "intention_kernel.http"
STREAM_HEADERS = {"Accept": "text/event-stream"}


def failing(error: ModelGatewayError) -> Any:
    """A script entry: every interpretation raises ``error``, as the gateway would."""

    def answer(request: ModelRequest) -> ModelGatewayError:
        return error

    return answer


def leaks(text: str) -> bool:
    return any(part in text for part in (PROVIDER_TEXT, "OPENAI_API_KEY", "sk-live", "sk-"))


def logged(caplog: pytest.LogCaptureFixture, *parts: str) -> bool:
    return any(r.name == LOGGER and all(p in r.getMessage() for p in parts) for r in caplog.records)


@pytest.mark.parametrize(
    ("kind", "status"),
    [("authentication", 401), ("bad_request", 400), ("not_found", 404), ("quota", 429)],
)
async def test_a_final_gateway_error_is_502_without_retry_after(
    desk: Desk, caplog: pytest.LogCaptureFixture, kind: str, status: int
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    message = f"openai rejected the credentials ({status}): {HINT}; said: {PROVIDER_TEXT}"
    error = ModelGatewayError(
        message, retryable=False, context={"kind": kind, "status": status, "retry_after": 30.0}
    )
    desk.model.inner.set("interpret", failing(error))
    async with serve(app_for(desk, busy="wait")) as live:
        answer = await live.post("t-1", "turn-1", SEARCH)
        streamed = await live.post("t-1", "turn-2", SEARCH, headers=STREAM_HEADERS)
    problem = is_problem(answer, 502, "MODEL_GATEWAY_FAILED")
    assert problem["retryable"] is False
    assert "retry-after" not in answer.headers
    assert not leaks(answer.text), answer.text
    # A stream that fails before its first item keeps the status too.
    assert is_problem(streamed, 502, "MODEL_GATEWAY_FAILED")["retryable"] is False
    assert "retry-after" not in streamed.headers and not leaks(streamed.text)
    assert logged(caplog, HINT, PROVIDER_TEXT, kind)


@pytest.mark.parametrize(
    ("asked", "header"),
    [(None, "1"), (0.2, "1"), (2.3, "3"), (7, "7"), (120.0, "120")],
)
async def test_a_retryable_gateway_error_is_503_with_the_providers_wait(
    desk: Desk, caplog: pytest.LogCaptureFixture, asked: float | None, header: str
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    error = ModelGatewayError(
        f"openai: rate limited (429); gave up after 4 attempts; {PROVIDER_TEXT}",
        context={"kind": "rate_limit", "status": 429, "retry_after": asked},
    )
    desk.model.inner.set("interpret", failing(error))
    async with serve(app_for(desk, busy="wait")) as live:
        answer = await live.post("t-1", "turn-1", SEARCH)
    problem = is_problem(answer, 503, "MODEL_GATEWAY_FAILED")
    assert problem["retryable"] is True
    assert answer.headers["retry-after"] == header
    assert "Idempotency-Key" in problem["detail"] and not leaks(answer.text)
    assert logged(caplog, "rate_limit", PROVIDER_TEXT)


async def test_a_gateway_error_mid_stream_is_an_error_event_without_provider_text(
    desk: Desk,
) -> None:
    error = ModelGatewayError(f"{HINT}: {PROVIDER_TEXT}", retryable=False)
    desk.model.inner.set("compose", failing(error))
    async with serve(app_for(desk, busy="wait")) as live:
        answer = await live.post("t-1", "turn-1", SEARCH, headers=STREAM_HEADERS)
    name, problem = events(answer.text)[-1]
    assert name == "error"
    assert (problem["status"], problem["code"], problem["retryable"]) == (
        502,
        "MODEL_GATEWAY_FAILED",
        False,
    )
    assert not leaks(answer.text)


OPENAI_KEY = "sk-proj-test0123456789abcdefghij"
ANTHROPIC_KEY = "sk-ant-api03-test0123456789"


async def test_openai_rejecting_the_key_is_502_and_the_hint_is_only_logged(
    sqlite_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    said = f"Incorrect API key provided: {OPENAI_KEY}. You can find your API key at ..."
    server = FakeServer(openai_error(401, said, "invalid_request_error", "invalid_api_key"))
    gateway = OpenAIGateway(
        "gpt-4.1-mini", api_key=OPENAI_KEY, http_client=server.client(), retry=policy(Clock())
    )
    desk = make_desk(sqlite_store, model=gateway)
    async with serve(app_for(desk, busy="wait")) as live:
        answer = await live.post("t-1", "turn-1", SEARCH)
    problem = is_problem(answer, 502, "MODEL_GATEWAY_FAILED")
    assert problem["retryable"] is False and "retry-after" not in answer.headers
    assert len(server.requests) == 1  # final: asked once
    assert "OPENAI_API_KEY" not in answer.text and OPENAI_KEY not in answer.text
    assert "401" not in problem["detail"]
    assert logged(caplog, "OPENAI_API_KEY", "authentication")
    assert not any(OPENAI_KEY in r.getMessage() for r in caplog.records)


async def test_anthropic_overloaded_is_503_with_its_retry_after(
    sqlite_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    server = FakeServer(anthropic_error(529, "overloaded_error", "Overloaded", retry_after="7"))
    clock = Clock()
    gateway = AnthropicGateway(
        "claude-sonnet-4-5",
        api_key=ANTHROPIC_KEY,
        http_client=server.client(),
        retry=policy(clock, attempts=2),
    )
    desk = make_desk(sqlite_store, model=gateway)
    async with serve(app_for(desk, busy="wait")) as live:
        answer = await live.post("t-1", "turn-1", SEARCH)
    problem = is_problem(answer, 503, "MODEL_GATEWAY_FAILED")
    assert problem["retryable"] is True
    assert answer.headers["retry-after"] == "7"
    assert len(server.requests) == 2 and clock.waits == [7.0]
    assert ANTHROPIC_KEY not in answer.text
    assert logged(caplog, "overloaded", "529")


async def test_a_final_gateway_error_kills_a_submitted_turn_and_is_502(
    desk: Desk, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    message = f"openai rejected the credentials (401): {HINT}; said: {PROVIDER_TEXT}"
    error = ModelGatewayError(
        message, retryable=False, context={"kind": "authentication", "status": 401}
    )
    desk.model.inner.set("interpret", failing(error))
    async with serve(app_for(desk)) as live:
        answer = await live.post("t-1", "turn-1", SEARCH)
        streamed = await live.post("t-1", "turn-2", SEARCH, headers=STREAM_HEADERS)
        again = await live.post("t-1", "turn-1", SEARCH)  # the same key: still dead
        state = await live.client.get("/v1/threads/t-1/turns/turn-1", headers=bearer())
    for refused in (answer, streamed, again):
        problem = is_problem(refused, 502, "MODEL_GATEWAY_FAILED")
        assert problem["retryable"] is False and problem["state"] == "dead"
        assert "retry-after" not in refused.headers and not leaks(refused.text)
    assert desk.model.count("interpret") == 2  # final: each turn was tried once
    body = state.json()
    assert (body["state"], body["attempts"], body["error_code"]) == (
        "dead",
        1,
        "MODEL_GATEWAY_FAILED",
    )
    assert body["error"] is None and not leaks(state.text)
    assert logged(caplog, HINT, PROVIDER_TEXT, "dead")


async def test_a_failure_that_may_pass_is_retried_by_the_worker(desk: Desk) -> None:
    error = ModelGatewayError(f"rate limited; {PROVIDER_TEXT}", context={"kind": "rate_limit"})
    model = scripted_model()
    asked: list[ModelRequest] = []

    def flaky(request: ModelRequest) -> Any:
        asked.append(request)
        return error if len(asked) <= 2 else model.complete(request)

    desk.model.inner.set("interpret", flaky)
    async with serve(app_for(desk)) as live:
        answer = await live.post("t-1", "turn-1", SEARCH)
        state = await live.client.get("/v1/threads/t-1/turns/turn-1", headers=bearer())
    assert answer.status_code == 200, answer.text
    assert answer.json()["response"]["text"].startswith("In Lisbon for 2 nights")
    assert answer.headers["idempotent-replayed"] == "false"
    body = state.json()
    assert (body["state"], body["attempts"]) == ("done", 3)
    assert body["error_code"] == "MODEL_GATEWAY_FAILED"  # the last failure, kept
    assert body["result"]["response"] == answer.json()["response"]
