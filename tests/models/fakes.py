"""In-process provider servers for the gateway tests: no network, the real SDKs.

``FakeServer`` is an ``httpx2.MockTransport`` handler that records every request the SDK sends
and answers from a queue (the last answer repeats). The body builders write responses and
errors in the providers' documented formats (OpenAI Chat Completions, Anthropic Messages,
Gemini ``generateContent``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2

from intention_kernel.models import RetryPolicy

Answer = httpx2.Response | Callable[[httpx2.Request], httpx2.Response]


class FakeServer:
    """Answers queued responses (a response, or a function of the request that may raise) and
    records the requests."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx2.Request] = []

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return answer(request) if callable(answer) else answer

    def client(self) -> httpx2.AsyncClient:
        # An explicit timeout: some SDKs warn about httpx's 5-second default.
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle), timeout=30.0)

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


def raises(error: type[httpx2.TransportError]) -> Callable[[httpx2.Request], httpx2.Response]:
    """An answer that fails at the transport (a timeout, a refused connection)."""

    def fail(request: httpx2.Request) -> httpx2.Response:
        raise error("simulated", request=request)

    return fail


class Clock:
    """A fake monotonic clock that sleeping advances; records every wait."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def policy(clock: Clock, **overrides: Any) -> RetryPolicy:
    """Deterministic retries: no jitter draw (the full backoff), no real waiting."""
    settings: dict[str, Any] = {
        "attempts": 4,
        "base_delay": 0.5,
        "max_delay": 10.0,
        "deadline": 120.0,
        "sleep": clock.sleep,
        "clock": clock,
        "jitter": lambda: 1.0,
    }
    return RetryPolicy(**{**settings, **overrides})


def error(status: int, body: Any, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(status, json=body, headers=headers or {})


# OpenAI Chat Completions ---------------------------------------------------------------------


def openai_body(
    content: str | None,
    *,
    finish: str = "stop",
    refusal: str | None = None,
    model: str = "gpt-4.1-mini-2025-04-14",
    usage: tuple[int, int] = (120, 30),
) -> httpx2.Response:
    return httpx2.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_760_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": refusal},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": sum(usage),
            },
        },
    )


def openai_json(value: Any, **kw: Any) -> httpx2.Response:
    return openai_body(json.dumps(value), **kw)


def openai_error(
    status: int, message: str, kind: str, code: str | None = None, **headers: str
) -> httpx2.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return error(status, body, {k.replace("_", "-"): v for k, v in headers.items()})


# Anthropic Messages ----------------------------------------------------------------------


def anthropic_body(
    content: list[dict[str, Any]],
    *,
    stop: str = "tool_use",
    model: str = "claude-sonnet-4-5-20250929",
    usage: tuple[int, int, int, int] = (100, 40, 0, 0),
) -> httpx2.Response:
    return httpx2.Response(
        200,
        json={
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": usage[0],
                "output_tokens": usage[1],
                "cache_creation_input_tokens": usage[2],
                "cache_read_input_tokens": usage[3],
            },
        },
    )


def anthropic_tool(name: str, value: Any, **kw: Any) -> httpx2.Response:
    block = {"type": "tool_use", "id": "toolu_01", "name": name, "input": value}
    return anthropic_body([block], **kw)


def anthropic_error(status: int, kind: str, message: str, **headers: str) -> httpx2.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return error(status, body, {k.replace("_", "-"): v for k, v in headers.items()})


# Gemini generateContent -----------------------------------------------------------------


def gemini_body(
    parts: list[dict[str, Any]],
    *,
    finish: str = "STOP",
    model: str = "gemini-2.5-flash",
    usage: tuple[int, int] = (80, 20),
) -> httpx2.Response:
    return httpx2.Response(
        200,
        json={
            "candidates": [
                {"content": {"parts": parts, "role": "model"}, "finishReason": finish, "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": usage[0],
                "candidatesTokenCount": usage[1],
                "totalTokenCount": sum(usage),
            },
            "modelVersion": model,
            "responseId": "resp-1",
        },
    )


def gemini_call(name: str, value: Any, **kw: Any) -> httpx2.Response:
    return gemini_body([{"functionCall": {"name": name, "args": value}}], **kw)


def gemini_error(status: int, code: str, message: str, **headers: str) -> httpx2.Response:
    body = {"error": {"code": status, "message": message, "status": code}}
    return error(status, body, {k.replace("_", "-"): v for k, v in headers.items()})
