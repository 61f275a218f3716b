"""``AnthropicGateway``: Claude through the Messages API, the answer as a forced tool call.

Why a tool: forcing one tool (``tool_choice={"type": "tool", "name": ...}``) whose
``input_schema`` is the request's schema makes the model answer with exactly one JSON object,
which the SDK hands over already decoded. The SDK's retries are off; ``RetryPolicy`` retries
instead (an overloaded API answers 529).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import anthropic
from anthropic import AsyncAnthropic
from anthropic.types import Message

from ..contracts.errors import ConfigurationError
from ..contracts.gateway import ModelRefusal, ModelRequest, ModelResponse
from ._common import TASK_GUIDES, answer_name, http_failure, model_name, render
from .retry import Failure, RetryPolicy, with_retries
from .schemas import Dialect, strip_null_optionals, to_dialect

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

    async def complete(self, request: ModelRequest) -> ModelResponse:
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

        async def call(seconds: float) -> Message:
            answer: Message = await self._client.messages.create(**params, timeout=seconds)
            return answer

        context = {"provider": self.provider, "model": name, "task": request.task}
        message = await with_retries(call, self._classify, self.retry, context)
        return self._response(message, tool, dict(request.output_schema))

    def _response(self, message: Message, tool: str, schema: dict[str, Any]) -> ModelResponse:
        used = message.usage
        usage = {
            "input_tokens": used.input_tokens
            + (used.cache_creation_input_tokens or 0)
            + (used.cache_read_input_tokens or 0),
            "output_tokens": used.output_tokens,
        }
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
        if isinstance(exc, anthropic.APITimeoutError):
            return Failure("timeout", True, "anthropic: the request timed out")
        if isinstance(exc, anthropic.APIConnectionError):
            return Failure("connection", True, "anthropic: could not reach the server")
        if isinstance(exc, anthropic.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            error = body.get("error") if isinstance(body.get("error"), dict) else body
            assert isinstance(error, dict)
            return http_failure(
                "anthropic",
                exc.status_code,
                headers=exc.response.headers,
                detail=str(error.get("message") or ""),
                code=str(error.get("type") or "") or None,
                key_hint="ANTHROPIC_API_KEY",
            )
        if isinstance(exc, anthropic.APIError | json.JSONDecodeError):  # a body that is not JSON
            return Failure("server", True, "anthropic: the server's answer was unreadable")
        return None
