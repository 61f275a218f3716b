"""``OpenAIGateway``: OpenAI's Chat Completions with a JSON Schema answer format.

Why Chat Completions: every OpenAI-compatible server (vLLM, llama.cpp server, Ollama, LM Studio)
speaks it, so one gateway serves them all by ``base_url``. The answer format is ``json_schema``
with ``strict`` on when the schema can be expressed in strict mode (``schemas.check_schema``);
otherwise the schema is sent as a guide (``strict: false``) and the kernel's own validation and
repair do the rest. The SDK's retries are off; ``RetryPolicy`` retries instead.

``stream`` asks the same with ``stream=True`` (usage in the last chunk) and yields each piece of
``choices[0].delta.content``; the chunks are gathered into the completion ``complete`` would
have got, read by the same ``_response``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any

import openai
from openai import AsyncOpenAI, AsyncStream
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from ..contracts.errors import ConfigurationError
from ..contracts.gateway import ModelOutputDelta, ModelRefusal, ModelRequest, ModelResponse
from ._common import (
    TASK_GUIDES,
    NotTheAPI,
    answer_name,
    http_failure,
    model_name,
    not_the_api,
    parse_json,
    render,
    restarted,
    stream_checked,
)
from ._retry import Failure, RetryPolicy, stream_with_retries, with_retries
from ._schemas import Dialect, check_schema, strip_null_optionals, to_dialect

__all__ = ["OpenAIGateway"]

_FINISH = {"stop": "stop", "tool_calls": "stop", "function_call": "stop", "length": "length"}
# The status an error sent inside a stream (``data: {"error": ...}``, after a 200) would have had.
_STREAM_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "invalid_api_key": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "insufficient_quota": 429,
    "rate_limit_exceeded": 429,
    "requests": 429,
    "tokens": 429,
}


class OpenAIGateway:
    """A ``ModelGateway`` over ``openai.AsyncOpenAI`` (Chat Completions, structured output).

    ``model`` is the default model (a request's ``model`` overrides it). The key comes from
    ``api_key`` or ``OPENAI_API_KEY``; ``base_url`` points at any OpenAI-compatible server
    (no key needed; ``provider`` then names it in responses and errors). ``strict``: ``None``
    (strict when the schema allows), ``True`` or ``False``. ``client`` replaces the client this
    gateway would build (its retries are turned off); ``http_client`` is an
    ``httpx2.AsyncClient`` for it.
    """

    dialect: Dialect = "openai"
    """The schema dialect of its structured output (for compile-time checks)."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: AsyncOpenAI | None = None,
        http_client: Any = None,
        provider: str = "openai",
        key_env: str = "OPENAI_API_KEY",
        strict: bool | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        retry: RetryPolicy | None = None,
        guides: Mapping[str, str] | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        if client is None:
            if api_key is None and not os.environ.get(key_env):
                if base_url is not None:  # a local server usually needs no key
                    api_key = "none"
                else:
                    raise ConfigurationError(
                        f"no API key for {provider}: set {key_env} or pass api_key",
                        context={"provider": provider, "env": key_env},
                    )
            try:
                client = AsyncOpenAI(
                    api_key=api_key,
                    base_url=base_url,
                    http_client=http_client,
                    default_headers=default_headers,
                    max_retries=0,
                )
            except openai.OpenAIError as exc:
                raise ConfigurationError(
                    f"cannot build the {provider} client: set {key_env} or pass api_key",
                    context={"provider": provider, "env": key_env},
                ) from exc
        self._client = client.with_options(max_retries=0)
        self.model = model
        self.provider = provider
        self.prefixes = (provider,)
        self.key_env = key_env
        self.strict = strict
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.retry = retry or RetryPolicy()
        self.guides = dict(TASK_GUIDES if guides is None else guides)
        self._formats: dict[str, tuple[dict[str, Any], bool]] = {}

    def _format(self, schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The schema to send and whether strict mode is on (cached: schemas repeat)."""
        key = json.dumps(schema, sort_keys=True)
        if key not in self._formats:
            strict = not check_schema("openai", schema) if self.strict is None else self.strict
            sent = to_dialect("openai", schema) if strict else schema
            if len(self._formats) >= 64:
                self._formats.clear()
            self._formats[key] = (sent, strict)
        return self._formats[key]

    def _request(self, request: ModelRequest) -> tuple[str, dict[str, Any]]:
        """The model to ask and the Chat Completions parameters, the same for both ways of
        asking."""
        name = model_name(request.model, self.model, self.prefixes)
        system, user = render(request, self.guides)
        schema, strict = self._format(dict(request.output_schema))
        messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": user})
        params: dict[str, Any] = {
            "model": name,
            "messages": messages,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": answer_name(request.task),
                    "schema": schema,
                    "strict": strict,
                },
            },
        }
        if self.max_tokens is not None:
            # OpenAI's own name; compatible servers know the older one.
            limit = "max_completion_tokens" if self.provider == "openai" else "max_tokens"
            params[limit] = self.max_tokens
        if self.temperature is not None:
            params["temperature"] = self.temperature
        return name, params

    async def complete(self, request: ModelRequest) -> ModelResponse:
        name, params = self._request(request)

        async def call(seconds: float) -> ChatCompletion:
            raw = await self._client.chat.completions.with_raw_response.create(
                **params, timeout=seconds
            )
            answer: object = raw.parse()
            if not isinstance(answer, ChatCompletion):  # not JSON: the SDK gives the text
                raise NotTheAPI(raw.headers.get("content-type"))
            return answer

        context = {"provider": self.provider, "model": name, "task": request.task}
        completion = await with_retries(call, self._classify, self.retry, context)
        return self._response(completion, dict(request.output_schema))

    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[ModelOutputDelta | ModelResponse]:
        """Deltas of ``choices[0].delta.content``, then the response ``complete`` would give.

        A refusal's text streams separately (``delta.refusal``) and is never yielded. A failure
        before the first delta is retried like ``complete``; a failure after deltas (a lost
        connection, an error event) is retried too, after ``ModelOutputDelta("", restarted=True)``:
        a model call has no effect to repeat, and the kernel uses only the final response.
        """
        name, params = self._request(request)
        schema = dict(request.output_schema)

        async def attempt(seconds: float) -> AsyncGenerator[ModelOutputDelta | ModelResponse, None]:
            chunks: AsyncStream[ChatCompletionChunk] = await self._client.chat.completions.create(
                **params, stream=True, stream_options={"include_usage": True}, timeout=seconds
            )
            state: ChatCompletionStreamState[object] = ChatCompletionStreamState()
            finished = False
            async with chunks:
                stream_checked(chunks.response.headers)
                async for chunk in chunks:
                    state.handle_chunk(chunk)
                    for choice in chunk.choices:
                        finished = finished or choice.finish_reason is not None
                        if choice.index == 0 and choice.delta.content:
                            yield ModelOutputDelta(text=choice.delta.content)
                if not finished:  # the body ended before any choice did: the answer is cut
                    raise openai.APIConnectionError(
                        message="the stream ended early", request=chunks.response.request
                    )
            yield self._response(state.current_completion_snapshot, schema)

        context = {"provider": self.provider, "model": name, "task": request.task}
        retried = stream_with_retries(attempt, self._classify, self.retry, context, restarted)
        async with aclosing(retried) as items:  # a consumer that stops early closes the stream
            async for item in items:
                yield item

    def _response(self, completion: ChatCompletion, schema: dict[str, Any]) -> ModelResponse:
        usage: dict[str, int] = {}
        if completion.usage is not None:
            usage = {
                "input_tokens": completion.usage.prompt_tokens,
                "output_tokens": completion.usage.completion_tokens,
            }
        common: dict[str, Any] = {
            "model": completion.model or None,
            "usage": usage,
            "provider": self.provider,
        }
        if not completion.choices:
            return ModelResponse(**common)
        choice = completion.choices[0]
        message = choice.message
        if message.refusal:
            return ModelResponse(
                **common,
                finish_reason="refusal",
                refusal=ModelRefusal(kind="refusal", message=message.refusal),
            )
        if choice.finish_reason == "content_filter":
            return ModelResponse(
                **common,
                finish_reason="content_filter",
                refusal=ModelRefusal(kind="content_filter"),
            )
        finish = _FINISH.get(choice.finish_reason, choice.finish_reason)
        if finish == "length":  # cut off: even JSON that parses may have lost a part
            return ModelResponse(**common, finish_reason=finish)
        output = parse_json(message.content)
        return ModelResponse(
            **common, output=strip_null_optionals(schema, output), finish_reason=finish
        )

    def _classify(self, exc: Exception) -> Failure | None:
        if isinstance(exc, NotTheAPI):
            return not_the_api(self.provider, exc)
        if isinstance(exc, openai.APITimeoutError):
            return Failure("timeout", True, f"{self.provider}: the request timed out")
        if isinstance(exc, openai.APIConnectionError):
            return Failure("connection", True, f"{self.provider}: could not reach the server")
        if isinstance(exc, openai.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            return http_failure(
                self.provider,
                exc.status_code,
                headers=exc.response.headers,
                detail=str(body.get("message") or ""),
                codes=(exc.code, exc.type),
                key_hint=self.key_env,
            )
        if isinstance(exc, openai.APIError) and isinstance(exc.body, dict):  # an error event
            status = _STREAM_ERROR_STATUS.get(str(exc.code)) or _STREAM_ERROR_STATUS.get(
                str(exc.type), 500
            )
            return http_failure(
                self.provider,
                status,
                detail=str(exc.body.get("message") or ""),
                codes=(exc.code, exc.type),
                key_hint=self.key_env,
            )
        if isinstance(exc, openai.APIError | json.JSONDecodeError):  # a body that is not JSON
            return Failure("server", True, f"{self.provider}: the server's answer was unreadable")
        return None
