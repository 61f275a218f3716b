"""Real model providers behind the ``ModelGateway`` protocol, each an optional extra.

- ``OpenAIGateway`` (extra ``openai``): Chat Completions with a strict JSON Schema answer,
  also for OpenAI-compatible servers (vLLM, llama.cpp server, Ollama, LM Studio) by ``base_url``.
- ``AnthropicGateway`` (extra ``anthropic``): the Messages API with a forced tool call.
- ``PydanticAIGateway`` (extra ``pydantic-ai``): Gemini, Groq, Mistral, Bedrock, Cohere and
  more through Pydantic AI's direct request API.
- ``resolve_model("openai:gpt-4.1-mini")``: a model string to one of them, keys from the
  environment; ``ConfigurationError`` says what to install or set.
- ``check_schema`` / ``to_dialect``: what each provider's schema dialect can express.

Every gateway also streams (``StreamingModelGateway``): ``stream`` yields the raw output text in
pieces, then the response ``complete`` would have returned.

Why lazy: a gateway's SDK is imported only when that gateway is used, so importing this package
(or ``intention_kernel``) needs none of them. See ``docs/models.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..contracts.gateway import ModelRefusal
from ._common import TASK_GUIDES
from ._resolve import PROVIDERS, Provider, resolve_model
from ._retry import Failure, RetryPolicy
from ._schemas import DIALECTS, Dialect, check_schema, strip_null_optionals, to_dialect

if TYPE_CHECKING:
    from ._anthropic import AnthropicGateway
    from ._openai import OpenAIGateway
    from ._pydantic_ai import PydanticAIGateway

__all__ = [
    "DIALECTS",
    "PROVIDERS",
    "TASK_GUIDES",
    "AnthropicGateway",
    "Dialect",
    "Failure",
    "ModelRefusal",
    "OpenAIGateway",
    "Provider",
    "PydanticAIGateway",
    "RetryPolicy",
    "check_schema",
    "resolve_model",
    "strip_null_optionals",
    "to_dialect",
]

_LAZY = {
    "OpenAIGateway": "._openai",
    "AnthropicGateway": "._anthropic",
    "PydanticAIGateway": "._pydantic_ai",
}


def __getattr__(name: str) -> Any:
    """Import a gateway (and its SDK) on first use."""
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
