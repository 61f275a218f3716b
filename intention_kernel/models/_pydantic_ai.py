"""``PydanticAIGateway``: every provider Pydantic AI reaches, through its direct request API.

Why: one adapter over ``pydantic_ai.direct.model_request`` reaches Gemini, Groq, Mistral,
Bedrock, Cohere and more, each with its own SDK and schema rules, which Pydantic AI's model
profiles already apply. The answer is requested as structured output (``output_mode="auto"``
lets each model choose a forced output tool or its native JSON Schema mode). The SDKs' retries
are off (``max_retries=0``); ``RetryPolicy`` retries instead.

``stream`` asks the same through ``pydantic_ai.direct.model_request_stream`` and yields the
answer part's pieces (the output tool call's arguments, or the JSON text in native mode); the
stream's final ``pydantic_ai`` response is read by the same ``_response``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, Literal

from pydantic_ai import exceptions as errors
from pydantic_ai import messages
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse, infer_model
from pydantic_ai.output import OutputObjectDefinition
from pydantic_ai.providers import infer_provider_class
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from ..contracts.errors import ConfigurationError
from ..contracts.gateway import ModelOutputDelta, ModelRefusal, ModelRequest, ModelResponse
from ._common import (
    TASK_GUIDES,
    answer_name,
    http_failure,
    parse_json,
    redact,
    render,
    restarted,
)
from ._retry import Failure, RetryPolicy, stream_with_retries, with_retries
from ._schemas import Dialect, strip_null_optionals

__all__ = ["PydanticAIGateway"]

_FINISH = {"stop": "stop", "tool_call": "stop", "length": "length"}


def build_model(model: str, *, http_client: Any = None) -> Model:
    """A Pydantic AI model from its own model string (``google:gemini-3.5-flash-lite``); a missing
    SDK or key is a ``ConfigurationError`` with Pydantic AI's instructions. ``http_client``
    (an ``httpx2.AsyncClient``) is handed to the provider."""
    try:
        if http_client is None:
            return infer_model(model)
        factory: Any = infer_provider_class(model.partition(":")[0])
        provider = factory(http_client=http_client)
        return infer_model(model, provider_factory=lambda _name: provider)
    except ImportError as exc:
        raise ConfigurationError(
            f"the SDK for {model!r} is not installed: {redact(exc, 400)}",
            context={"model": model},
        ) from exc
    except (errors.UserError, TypeError) as exc:
        raise ConfigurationError(
            f"cannot use {model!r}: {redact(exc, 400)}", context={"model": model}
        ) from exc


class PydanticAIGateway:
    """A ``ModelGateway`` over a Pydantic AI ``Model`` (or a Pydantic AI model string).

    A request's ``model`` is not used to switch models here: build one gateway per model.
    ``http_client`` (an ``httpx2.AsyncClient``) is handed to the provider of a model string;
    ``key_hint`` names the key in credential errors (``GOOGLE_API_KEY``).
    ``output_mode``: ``auto`` (the model's preferred structured output), ``tool`` (a forced
    output tool) or ``native`` (the provider's JSON Schema response format).
    """

    def __init__(
        self,
        model: Model | str,
        *,
        output_mode: Literal["auto", "tool", "native"] = "auto",
        max_tokens: int | None = None,
        temperature: float | None = None,
        retry: RetryPolicy | None = None,
        guides: Mapping[str, str] | None = None,
        settings: ModelSettings | None = None,
        http_client: Any = None,
        key_hint: str = "the provider's API key",
    ) -> None:
        self.key_hint = key_hint
        self.model = (
            build_model(model, http_client=http_client) if isinstance(model, str) else model
        )
        self.output_mode = output_mode
        self.retry = retry or RetryPolicy()
        self.guides = dict(TASK_GUIDES if guides is None else guides)
        self.settings: ModelSettings = ModelSettings(**(settings or {}))
        if max_tokens is not None:
            self.settings["max_tokens"] = max_tokens
        if temperature is not None:
            self.settings["temperature"] = temperature
        self.settings["max_retries"] = 0

    @property
    def provider(self) -> str:
        """The provider's name as Pydantic AI gives it (``google``, ``groq``...)."""
        return str(self.model.system)

    @property
    def dialect(self) -> Dialect | None:
        """The schema dialect the provider's structured output follows, where one applies
        (``None``: Pydantic AI adapts schemas for it)."""
        system = self.provider
        if system.startswith("google"):
            return "gemini"
        if system == "anthropic":
            return "anthropic"
        return "openai" if system == "openai" else None

    def _request(
        self, request: ModelRequest
    ) -> tuple[str, list[messages.ModelMessage], ModelRequestParameters]:
        """The answer's name, the messages and the structured-output parameters, the same for
        both ways of asking."""
        system, user = render(request, self.guides)
        name = answer_name(request.task)
        schema: dict[str, Any] = dict(request.output_schema)
        described = f"Record your {request.task} answer."
        params = ModelRequestParameters(
            output_mode=self.output_mode,
            output_tools=[
                ToolDefinition(
                    name=name,
                    description=described,
                    parameters_json_schema=schema,
                    kind="output",
                )
            ],
            output_object=OutputObjectDefinition(
                json_schema=schema, name=name, description=described
            ),
            allow_text_output=self.output_mode == "native",
        )
        prompt: list[messages.ModelMessage] = [
            messages.ModelRequest.user_text_prompt(user, instructions=system or None)
        ]
        return name, prompt, params

    def _settings(self, seconds: float) -> ModelSettings:
        settings = self.settings.copy()
        settings["timeout"] = seconds
        return settings

    async def complete(self, request: ModelRequest) -> ModelResponse:
        name, prompt, params = self._request(request)

        async def call(seconds: float) -> messages.ModelResponse:
            return await model_request(
                self.model,
                prompt,
                model_settings=self._settings(seconds),
                model_request_parameters=params,
                instrument=False,
            )

        context = {"provider": self.provider, "model": self.model.model_name, "task": request.task}
        try:
            answer = await with_retries(call, self._classify, self.retry, context)
        except errors.UnexpectedModelBehavior as exc:
            return self._unusable(exc)
        return self._response(answer, name, dict(request.output_schema))

    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[ModelOutputDelta | ModelResponse]:
        """Deltas of the answer part, then the response ``complete`` would give.

        The answer part is the output tool's call (its arguments as the provider streams them;
        a provider that sends them as an object, like Gemini, gives one delta with their JSON)
        or, when the model answers in text (native output), that text. Other text and thinking
        are never yielded. Failures before the first delta are retried like ``complete``; after
        deltas, a retry follows ``ModelOutputDelta("", restarted=True)``: a model call has no
        effect to repeat, and the kernel uses only the final response.
        """
        name, prompt, params = self._request(request)
        schema = dict(request.output_schema)

        async def attempt(seconds: float) -> AsyncGenerator[ModelOutputDelta | ModelResponse, None]:
            async with model_request_stream(
                self.model,
                prompt,
                model_settings=self._settings(seconds),
                model_request_parameters=params,
                instrument=False,
            ) as response:
                async for piece in _answer_pieces(response, name):
                    yield ModelOutputDelta(text=piece)
                answer = response.get()
            yield self._response(answer, name, schema)

        context = {"provider": self.provider, "model": self.model.model_name, "task": request.task}
        retried = stream_with_retries(attempt, self._classify, self.retry, context, restarted)
        try:
            async with aclosing(retried) as items:  # a consumer that stops early closes it
                async for item in items:
                    yield item
        except errors.UnexpectedModelBehavior as exc:
            yield self._unusable(exc)

    def _unusable(self, exc: errors.UnexpectedModelBehavior) -> ModelResponse:
        """A content-filter stop Pydantic AI raised, or an answer it could not read (the
        kernel's to repair, like invalid JSON)."""
        if isinstance(exc, errors.ContentFilterError):
            return ModelResponse(
                model=self.model.model_name,
                provider=self.provider,
                finish_reason="content_filter",
                refusal=ModelRefusal(kind="content_filter", message=redact(exc.message)),
            )
        return ModelResponse(model=self.model.model_name, provider=self.provider)

    def _response(
        self, answer: messages.ModelResponse, name: str, schema: dict[str, Any]
    ) -> ModelResponse:
        usage = {
            "input_tokens": answer.usage.input_tokens,
            "output_tokens": answer.usage.output_tokens,
        }
        finish = _FINISH.get(str(answer.finish_reason), answer.finish_reason)
        common: dict[str, Any] = {
            "model": answer.model_name or self.model.model_name,
            "provider": answer.provider_name or self.provider,
            "usage": usage,
            "finish_reason": finish,
        }
        if finish == "content_filter":
            return ModelResponse(**common, refusal=ModelRefusal(kind="content_filter"))
        if finish == "length":  # cut off: even JSON that parses may have lost a part
            return ModelResponse(**common)
        output: Any = None
        for part in answer.parts:
            if isinstance(part, messages.ToolCallPart) and part.tool_name == name:
                args = part.args
                output = parse_json(args) if isinstance(args, str) else args
                break
            if isinstance(part, messages.TextPart) and output is None:
                output = parse_json(part.content)
        if output is not None:
            output = strip_null_optionals(schema, json.loads(json.dumps(output)))
        return ModelResponse(**common, output=output)

    def _classify(self, exc: Exception) -> Failure | None:
        provider = self.provider
        if isinstance(exc, errors.ModelQuotaExceededError):  # some come as a 429: never retried
            return Failure("quota", False, f"{provider}: the account's quota is used up")
        if isinstance(exc, errors.ModelHTTPError):
            body = exc.body if isinstance(exc.body, dict) else {}
            error = body.get("error") if isinstance(body.get("error"), dict) else body
            detail = str(error.get("message") or "") if isinstance(error, dict) else ""
            failure = http_failure(
                provider,
                exc.status_code,
                detail=detail,
                codes=(exc.provider_error_code,),
                key_hint=self.key_hint,
            )
            if exc.retry_after is not None and failure.retryable:
                return Failure(failure.kind, True, failure.message, failure.status, exc.retry_after)
            return failure
        if isinstance(exc, errors.ModelTimeoutError | errors.ModelRequestTimeout):
            return Failure("timeout", True, f"{provider}: the request timed out")
        if isinstance(exc, errors.ModelConnectionError):
            return Failure("connection", True, f"{provider}: could not reach the server")
        if isinstance(exc, errors.ModelRateLimitError):
            return Failure("rate_limit", True, f"{provider}: rate limited", None, exc.retry_after)
        if isinstance(exc, errors.ModelUnavailableError):
            return Failure("overloaded", True, f"{provider}: unavailable", None, exc.retry_after)
        if isinstance(exc, errors.ModelServerError):
            return Failure("server", True, f"{provider}: server error", None, exc.retry_after)
        if isinstance(exc, errors.ModelAuthenticationError):
            return Failure(
                "authentication",
                False,
                f"{provider} rejected the credentials: check {self.key_hint}",
            )
        if isinstance(exc, errors.ModelRequestRejectedError):
            return Failure(
                "bad_request", False, f"{provider} rejected the request: {redact(exc.message)}"
            )
        if isinstance(exc, errors.ModelAPIError):  # not categorised: an unreadable answer...
            return Failure("server", True, f"{provider}: the request failed: {redact(exc.message)}")
        if isinstance(exc, errors.UserError):
            return Failure("configuration", False, f"{provider}: {redact(exc)}")
        return None


async def _answer_pieces(response: StreamedResponse, name: str) -> AsyncIterator[str]:
    """The answer part's text as it streams: the first call of the output tool ``name``, or the
    first text part when the request's resolved output mode answers in text."""
    in_text = response.model_request_parameters.output_mode in ("native", "prompted")
    index: int | None = None
    whole = False  # arguments that come as an object are written out once, when the part ends
    async for event in response:
        if isinstance(event, messages.PartStartEvent) and index is None:
            part = event.part
            if isinstance(part, messages.ToolCallPart) and part.tool_name == name:
                index = event.index
                whole = isinstance(part.args, dict)
                if isinstance(part.args, str) and part.args:
                    yield part.args
            elif isinstance(part, messages.TextPart) and in_text:
                index = event.index
                if part.content:
                    yield part.content
        elif isinstance(event, messages.PartDeltaEvent) and event.index == index:
            delta = event.delta
            if isinstance(delta, messages.TextPartDelta) and delta.content_delta:
                yield delta.content_delta
            elif isinstance(delta, messages.ToolCallPartDelta):
                if isinstance(delta.args_delta, dict):
                    whole = True
                elif delta.args_delta and not whole:
                    yield delta.args_delta
        elif isinstance(event, messages.PartEndEvent) and event.index == index and whole:
            part = event.part
            if isinstance(part, messages.ToolCallPart):
                yield json.dumps(part.args, ensure_ascii=False)
