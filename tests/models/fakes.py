"""In-process provider servers for the gateway tests: no network, the real SDKs.

``FakeServer`` is an ``httpx2.MockTransport`` handler that records every request the SDK sends
and answers from a queue (the last answer repeats). The body builders write responses and
errors in the providers' documented formats (OpenAI Chat Completions, Anthropic Messages,
Gemini ``generateContent``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
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
    model: str = "gemini-3.5-flash-lite",
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


# Server-sent events ---------------------------------------------------------------------


class EventStream(httpx2.AsyncByteStream):
    """A ``text/event-stream`` body sent piece by piece; it may then stall (``stall`` seconds,
    a server that stops writing) or lose the connection (``fail``)."""

    def __init__(
        self,
        pieces: list[bytes],
        *,
        fail: type[httpx2.TransportError] | None = None,
        stall: float = 0.0,
    ) -> None:
        self.pieces = pieces
        self.fail = fail
        self.stall = stall
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        if self.stall:
            await asyncio.sleep(self.stall)
        if self.fail is not None:
            raise self.fail("connection lost mid-stream")

    async def aclose(self) -> None:
        self.closed = True


def sse(
    events: list[tuple[str | None, Any]],
    *,
    fail: type[httpx2.TransportError] | None = None,
    stall: float = 0.0,
) -> httpx2.Response:
    """A 200 ``text/event-stream`` response: one ``event:``/``data:`` block per event (``data``
    as JSON, or as given when it is a string, like ``[DONE]``)."""
    pieces = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        pieces.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    body = EventStream([p.encode() for p in pieces], fail=fail, stall=stall)
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=body)


def split(text: str, size: int = 7) -> list[str]:
    """A text in the small pieces a provider streams."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def openai_chunks(
    content: str | None,
    *,
    finish: str | None = "stop",
    refusal: str | None = None,
    model: str = "gpt-4.1-mini-2025-04-14",
    usage: tuple[int, int] | None = (120, 30),
    upto: int | None = None,
) -> list[tuple[str | None, Any]]:
    """The chunks of a streamed chat completion (``stream_options.include_usage``): the role
    first, the content (or refusal) in pieces, the finish reason, the usage, ``[DONE]``.
    ``upto`` keeps only the first that many chunks (a stream cut short)."""
    base = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_760_000_000,
        "model": model,
        "system_fingerprint": None,
    }

    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        return {**base, "choices": [choice], "usage": None}

    first = {"role": "assistant", "content": "" if refusal is None else None, "refusal": None}
    chunks = [chunk(first)]
    chunks += [chunk({"content": piece}) for piece in split(content or "")]
    chunks += [chunk({"refusal": piece}) for piece in split(refusal or "")]
    if finish is not None:
        chunks.append(chunk({}, finish))
    if usage is not None:
        counts = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
        chunks.append({**base, "choices": [], "usage": {**counts, "total_tokens": sum(usage)}})
    events: list[tuple[str | None, Any]] = [(None, c) for c in chunks]
    if upto is not None:
        return events[:upto]
    return [*events, (None, "[DONE]")]


def openai_stream(content: str | None, **kw: Any) -> httpx2.Response:
    return sse(openai_chunks(content, **kw))


def anthropic_events(
    blocks: list[dict[str, Any]],
    *,
    stop: str = "tool_use",
    model: str = "claude-sonnet-4-5-20250929",
    usage: tuple[int, int, int, int] = (100, 40, 0, 0),
    upto: int | None = None,
) -> list[tuple[str | None, Any]]:
    """A streamed Messages answer as the API documents it: ``message_start`` (input usage),
    per block ``content_block_start``, ``content_block_delta`` pieces (``input_json_delta`` for
    a tool's input, ``text_delta`` for text) and ``content_block_stop``, a ``ping``, then
    ``message_delta`` (stop reason, output tokens) and ``message_stop``."""
    start: dict[str, Any] = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage[0],
            "output_tokens": 1,
            "cache_creation_input_tokens": usage[2],
            "cache_read_input_tokens": usage[3],
        },
    }
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(blocks):
        if block["type"] == "tool_use":
            opened = {**block, "input": {}}
            text = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *split(text)]]
        else:
            opened = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in split(block["text"])]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opened},
            )
        )
        events += [
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
            for delta in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": usage[1]},
    }
    events += [("message_delta", delta), ("message_stop", {"type": "message_stop"})]
    return events if upto is None else events[:upto]


def anthropic_stream(blocks: list[dict[str, Any]], **kw: Any) -> httpx2.Response:
    return sse(anthropic_events(blocks, **kw))


def anthropic_tool_block(name: str, value: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_01", "name": name, "input": value}


def anthropic_error_event(kind: str, message: str) -> tuple[str, Any]:
    return ("error", {"type": "error", "error": {"type": kind, "message": message}})


def gemini_stream(chunks: list[dict[str, Any]]) -> httpx2.Response:
    """``streamGenerateContent?alt=sse``: one ``data:`` event per ``GenerateContentResponse``."""
    return sse([(None, chunk) for chunk in chunks])


# A slow server on a real socket ------------------------------------------------------------


class TrickleServer:
    """A loopback HTTP/1.1 server that answers every request with ``body`` one byte at a time,
    ``pause`` seconds apart, over a real socket: every byte resets an SDK's read timeout, so
    only a bound on the whole answer cuts it short. ``requests`` counts the requests read;
    ``answering`` is set once the first one is."""

    def __init__(
        self, body: bytes, *, pause: float = 0.03, content_type: str = "application/json"
    ) -> None:
        self.body = body
        self.pause = pause
        self.content_type = content_type
        self.requests = 0
        self.answering = asyncio.Event()
        self.url = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> TrickleServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:  # one request after another on a kept-alive connection
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                self.requests += 1
                self.answering.set()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: %b\r\ncontent-length: %d\r\n\r\n"
                    % (self.content_type.encode(), len(self.body))
                )
                await writer.drain()
                for byte in self.body:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(self.pause)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client gave up on the answer and closed the connection
        finally:
            writer.close()
            self._tasks.discard(task)
