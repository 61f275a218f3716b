"""``resolve_model("openai:gpt-4.1-mini")``: a model string users already know, to a gateway.

Why checked here: a missing extra, a missing key or a misspelt provider should stop the host at
start with a ``ConfigurationError`` that says what to install or set, not fail the first turn.
The SDKs are imported only when their gateway is built, so ``import intention_kernel`` stays
light and works without any of them.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

from ..contracts.errors import ConfigurationError
from ..contracts.gateway import ModelGateway
from .schemas import Dialect

__all__ = ["PROVIDERS", "Provider", "resolve_model"]


@dataclass(frozen=True, slots=True)
class Provider:
    """One model-string prefix: which gateway serves it, what must be installed and set."""

    gateway: str
    """``openai``, ``anthropic`` or ``pydantic-ai``: the gateway module that serves it."""
    modules: tuple[str, ...]
    """Import names that must be installed (the SDKs)."""
    install: str
    """What to install when one is missing."""
    keys: tuple[str, ...] = ()
    """Environment variables, one of which must be set (none: the SDK finds credentials)."""
    target: str = ""
    """Pydantic AI's own name for the provider (``pydantic-ai`` gateway only)."""
    dialect: Dialect | None = None
    """The schema dialect its structured output follows (``None``: adapted by Pydantic AI)."""


def _pai(
    target: str, sdk: str, extra: str, keys: tuple[str, ...], dialect: Dialect | None = None
) -> Provider:
    install = (
        'pip install "intention-kernel[pydantic-ai]"'
        if extra == "google"
        else f'pip install "intention-kernel[pydantic-ai]" "pydantic-ai-slim[{extra}]"'
    )
    return Provider("pydantic-ai", ("pydantic_ai", sdk), install, keys, target, dialect)


_GEMINI = _pai("google", "google.genai", "google", ("GOOGLE_API_KEY", "GEMINI_API_KEY"), "gemini")
_VERTEX = _pai("google-cloud", "google.genai", "google", (), "gemini")

PROVIDERS: dict[str, Provider] = {
    "openai": Provider(
        "openai",
        ("openai",),
        'pip install "intention-kernel[openai]"',
        ("OPENAI_API_KEY",),
        dialect="openai",
    ),
    "ollama": Provider(
        "openai", ("openai",), 'pip install "intention-kernel[openai]"', dialect="openai"
    ),
    "anthropic": Provider(
        "anthropic",
        ("anthropic",),
        'pip install "intention-kernel[anthropic]"',
        ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
        dialect="anthropic",
    ),
    "google-gla": _GEMINI,
    "google": _GEMINI,
    "gemini": _GEMINI,
    "google-vertex": _VERTEX,
    "google-cloud": _VERTEX,
    "groq": _pai("groq", "groq", "groq", ("GROQ_API_KEY",)),
    "mistral": _pai("mistral", "mistralai", "mistral", ("MISTRAL_API_KEY",)),
    "cohere": _pai("cohere", "cohere", "cohere", ("CO_API_KEY",)),
    "bedrock": _pai("bedrock", "boto3", "bedrock", ()),
    "deepseek": _pai("deepseek", "openai", "openai", ("DEEPSEEK_API_KEY",), "openai"),
    "openrouter": _pai("openrouter", "openai", "openai", ("OPENROUTER_API_KEY",), "openai"),
    "xai": _pai("xai", "xai_sdk", "xai", ("XAI_API_KEY",)),
    "grok": _pai("xai", "xai_sdk", "xai", ("XAI_API_KEY",)),
    "cerebras": _pai("cerebras", "openai", "cerebras", ("CEREBRAS_API_KEY",), "openai"),
    "together": _pai("together", "openai", "openai", ("TOGETHER_API_KEY",), "openai"),
    "fireworks": _pai("fireworks", "openai", "openai", ("FIREWORKS_API_KEY",), "openai"),
    "huggingface": _pai("huggingface", "huggingface_hub", "huggingface", ("HF_TOKEN",)),
}
"""Every model-string prefix ``resolve_model`` knows, with what it needs."""

_OLLAMA_URL = "http://localhost:11434/v1"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing
        return False


def resolve_model(model: str, *, http_client: Any = None, **options: Any) -> ModelGateway:
    """The gateway for a model string ``provider:model`` (``openai:gpt-4.1-mini``,
    ``anthropic:claude-sonnet-4-5``, ``google-gla:gemini-3.5-flash-lite``, ``ollama:llama3.2``...).

    Keys come from the providers' usual environment variables (``PROVIDERS`` lists them);
    ``options`` go to the gateway (``retry``, ``max_tokens``, ``temperature``...), and
    ``http_client`` (an ``httpx2.AsyncClient``) to its SDK. An unknown prefix, a missing extra
    or a missing key is a ``ConfigurationError`` that says what to install or set.
    """
    prefix, sep, name = model.partition(":")
    known = ", ".join(sorted(PROVIDERS))
    if not sep or not prefix or not name:
        raise ConfigurationError(
            f"a model string is provider:model, e.g. openai:gpt-4.1-mini (got {model!r})",
            context={"model": model, "prefixes": sorted(PROVIDERS)},
        )
    provider = PROVIDERS.get(prefix)
    if provider is None:
        raise ConfigurationError(
            f"unknown model provider {prefix!r}; known: {known}",
            context={"model": model, "prefixes": sorted(PROVIDERS)},
        )
    missing = [m for m in provider.modules if not _installed(m)]
    if missing:
        raise ConfigurationError(
            f"{model!r} needs {', '.join(missing)}: {provider.install}",
            context={"model": model, "missing": missing, "install": provider.install},
        )
    if provider.keys and not any(os.environ.get(k) for k in provider.keys):
        raise ConfigurationError(
            f"{model!r} needs an API key: set {' or '.join(provider.keys)}",
            context={"model": model, "env": list(provider.keys)},
        )
    if provider.gateway == "openai":
        from .openai import OpenAIGateway

        if prefix == "ollama":
            options.setdefault("base_url", os.environ.get("OLLAMA_BASE_URL", _OLLAMA_URL))
            options.setdefault("api_key", os.environ.get("OLLAMA_API_KEY", "ollama"))
            options.setdefault("provider", "ollama")
            options.setdefault("key_env", "OLLAMA_API_KEY")
        return OpenAIGateway(name, http_client=http_client, **options)
    if provider.gateway == "anthropic":
        from .anthropic import AnthropicGateway

        return AnthropicGateway(name, http_client=http_client, **options)
    from .pydantic_ai import PydanticAIGateway

    if provider.keys:
        options.setdefault("key_hint", " or ".join(provider.keys))
    return PydanticAIGateway(f"{provider.target}:{name}", http_client=http_client, **options)
