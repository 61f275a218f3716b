"""``AnthropicGateway``: Claude through the Messages API, the answer as a forced tool call.

Why a tool: forcing one tool (``tool_choice={"type": "tool", "name": ...}``) whose
``input_schema`` is the request's schema makes the model answer with exactly one JSON object,
which the SDK hands over already decoded. The SDK's retries are off; ``RetryPolicy`` retries
instead (an overloaded API answers 529).

``stream`` asks the same through the SDK's message stream and yields the tool input's
``input_json_delta.partial_json`` pieces; the SDK gathers the events into the message
``complete`` would have got, read by the same ``_response``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any

import anthropic
import httpx2
from anthropic import AsyncAnthropic
from anthropic.types import Message

from ..contracts.errors import ConfigurationError
from ..contracts.gateway import ModelOutputDelta, ModelRefusal, ModelRequest, ModelResponse
from ._common import (
    TASK_GUIDES,
    NotTheAPI,
    answer_name,
    http_failure,
    model_name,
    not_the_api,
    render,
    restarted,
    stream_checked,
)
from ._retry import Failure, RetryPolicy, stream_with_retries, with_retries
from ._schemas import Dialect, strip_null_optionals, to_dialect

__all__ = ["AnthropicGateway"]

_FINISH = {
    "end_turn": "stop",
    "tool_use": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
}
_KEY_ENVS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
# The status of each documented error type: an ``error`` event inside a stream comes after a 200.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class AnthropicGateway:
    """A ``ModelGateway`` over ``anthropic.AsyncAnthropic`` (Messages API, forced tool call).

    ``model`` is the default model (a request's ``model`` overrides it). The key comes from
    ``api_key`` or ``ANTHROPIC_API_KEY``. ``max_tokens`` bounds each answer (the API requires
    a bound). ``client`` replaces the client this gateway would build (its retries are turned
    off); ``http_client`` is an ``httpx2.AsyncClient`` for it.
    """

    prefixes: tuple[str, ...] = ("anthropic",)
    provider = "anthropic"
    dialect: Dialect = "anthropic"
    """The schema dialect of its structured output (for compile-time checks)."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: AsyncAnthropic | None = None,
        http_client: Any = None,
        max_tokens: int = 4096,
        retry: RetryPolicy | None = None,
        guides: Mapping[str, str] | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        if client is None:
            if api_key is None and not any(os.environ.get(k) for k in _KEY_ENVS):
                raise ConfigurationError(
                    "no API key for anthropic: set ANTHROPIC_API_KEY or pass api_key",
                    context={"provider": "anthropic", "env": "ANTHROPIC_API_KEY"},
                )
            client = AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                http_client=http_client,
                default_headers=default_headers,
                max_retries=0,
            )
        self._client = client.with_options(max_retries=0)
        self.model = model
        self.max_tokens = max_tokens
        self.retry = retry or RetryPolicy()
        self.guides = dict(TASK_GUIDES if guides is None else guides)
        self._schemas: dict[str, dict[str, Any]] = {}

    def _schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        key = json.dumps(schema, sort_keys=True)
        if key not in self._schemas:
            if len(self._schemas) >= 64:
                self._schemas.clear()
            self._schemas[key] = to_dialect("anthropic", schema)
        return self._schemas[key]

    def _request(self, request: ModelRequest) -> tuple[str, str, dict[str, Any]]:
        """The model to ask, the tool's name and the Messages parameters, the same for both ways
        of asking."""
        name = model_name(request.model, self.model, self.prefixes)
        system, user = render(request, self.guides)
        tool = answer_name(request.task)
        params: dict[str, Any] = {
            "model": name,
            "max_tokens": self.max_tokens,
            "messages": [{"role": "user", "content": user}],
            "tools": [
                {
                    "name": tool,
                    "description": f"Record your {request.task} answer.",
                    "input_schema": self._schema(dict(request.output_schema)),
                }
            ],
            "tool_choice": {"type": "tool", "name": tool},
        }
        if system:
            params["system"] = system
        return name, tool, params

    async def complete(self, request: ModelRequest) -> ModelResponse:
        name, tool, params = self._request(request)

        async def call(seconds: float) -> Message:
            raw = await self._client.messages.with_raw_response.create(**params, timeout=seconds)
            answer: object = await raw.parse()
            if not isinstance(answer, Message):  # not JSON: the SDK gives the text
                raise NotTheAPI(raw.headers.get("content-type"))
            return answer

        context = {"provider": self.provider, "model": name, "task": request.task}
        message = await with_retries(call, self._classify, self.retry, context)
        return self._response(message, tool, dict(request.output_schema))

    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[ModelOutputDelta | ModelResponse]:
        """Deltas of the forced tool's input JSON, then the response ``complete`` would give.

        Text blocks (a refusal's explanation) are never yielded. A failure before the first
        delta is retried like ``complete``; a failure after deltas (an ``error`` event such as
        ``overloaded_error``, a lost connection) is retried too, after
        ``ModelOutputDelta("", restarted=True)``: a model call has no effect to repeat, and the
        kernel uses only the final response. A tool input that is not JSON ends the stream with
        a response without output, as ``complete`` answers it (the kernel repairs it).
        """
        name, tool, params = self._request(request)
        schema = dict(request.output_schema)

        async def attempt(seconds: float) -> AsyncGenerator[ModelOutputDelta | ModelResponse, None]:
            answer: list[int] = []  # the indexes of the answer's tool_use blocks
            async with self._client.messages.stream(**params, timeout=seconds) as events:
                stream_checked(events.response.headers)
                try:
                    async for event in events:
                        if event.type == "content_block_start":
                            block = event.content_block
                            if block.type == "tool_use" and block.name == tool:
                                answer.append(event.index)
                        elif (
                            event.type == "content_block_delta"
                            and event.delta.type == "input_json_delta"
                            and event.index in answer
                            and event.delta.partial_json
                        ):
                            yield ModelOutputDelta(text=event.delta.partial_json)
                except json.JSONDecodeError:  # an event that is not JSON: a server fault
                    raise
                except ValueError:  # the model's tool input is not JSON: the kernel repairs it
                    yield self._unreadable(events.current_message_snapshot)
                    return
                message = await events.get_final_message()
                if message.stop_reason is None:  # the body ended before message_delta: cut
                    raise anthropic.APIConnectionError(
                        message="the stream ended early", request=events.response.request
                    )
            yield self._response(message, tool, schema)

        context = {"provider": self.provider, "model": name, "task": request.task}
        retried = stream_with_retries(attempt, self._classify, self.retry, context, restarted)
        async with aclosing(retried) as items:  # a consumer that stops early closes the stream
            async for item in items:
                yield item

    def _unreadable(self, message: Message) -> ModelResponse:
        """The answer when the tool input does not parse: no output, as ``complete`` answers
        JSON it cannot use, so the kernel's repair runs (what was spent so far is counted)."""
        return ModelResponse(
            model=message.model or None, usage=_usage(message), provider=self.provider
        )

    def _response(self, message: Message, tool: str, schema: dict[str, Any]) -> ModelResponse:
        usage = _usage(message)
        finish = _FINISH.get(str(message.stop_reason), message.stop_reason)
        common: dict[str, Any] = {
            "model": message.model or None,
            "usage": usage,
            "provider": self.provider,
            "finish_reason": finish,
        }
        if finish == "refusal":
            said = " ".join(b.text for b in message.content if b.type == "text")
            return ModelResponse(**common, refusal=ModelRefusal(kind="refusal", message=said))
        if finish == "length":  # cut off: the tool input may have lost a part
            return ModelResponse(**common)
        for block in message.content:
            if block.type == "tool_use" and block.name == tool:
                output = json.loads(json.dumps(block.input))  # plain JSON, whatever the SDK gave
                return ModelResponse(**common, output=strip_null_optionals(schema, output))
        return ModelResponse(**common)

    def _classify(self, exc: Exception) -> Failure | None:
        if isinstance(exc, NotTheAPI):
            return not_the_api("anthropic", exc)
        if isinstance(exc, anthropic.APITimeoutError):
            return Failure("timeout", True, "anthropic: the request timed out")
        if isinstance(exc, anthropic.APIConnectionError):
            return Failure("connection", True, "anthropic: could not reach the server")
        # A stream's body is read outside the SDK's error mapping: its transport errors come bare.
        if isinstance(exc, httpx2.TimeoutException):
            return Failure("timeout", True, "anthropic: the request timed out")
        if isinstance(exc, httpx2.TransportError):
            return Failure("connection", True, "anthropic: the connection was lost")
        if isinstance(exc, anthropic.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            error = body.get("error") if isinstance(body.get("error"), dict) else body
            assert isinstance(error, dict)
            kind = str(error.get("type") or "")
            status = exc.status_code
            if status < 400:  # an error event inside a stream, after a 200
                status = _ERROR_STATUS.get(kind, 500)
            details = error.get("details")
            cause = details.get("error_code") if isinstance(details, dict) else None
            return http_failure(
                "anthropic",
                status,
                headers=exc.response.headers,
                detail=str(error.get("message") or ""),
                codes=(kind, cause if isinstance(cause, str) else None),
                key_hint="ANTHROPIC_API_KEY",
            )
        if isinstance(exc, anthropic.APIError | json.JSONDecodeError):  # not JSON
            return Failure("server", True, "anthropic: the server's answer was unreadable")
        return None


def _usage(message: Message) -> dict[str, int]:
    used = message.usage
    return {
        "input_tokens": used.input_tokens
        + (used.cache_creation_input_tokens or 0)
        + (used.cache_read_input_tokens or 0),
        "output_tokens": used.output_tokens,
    }
