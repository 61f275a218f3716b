"""``resolve_model("openai:gpt-4.1-mini")``: a model string users already know, to a gateway.

Why checked here: a missing extra, a missing key or a misspelt provider should stop the host at
start with a ``ConfigurationError`` that says what to install or set, not fail the first turn.
The SDKs are imported only when their gateway is built, so ``import intention_kernel`` stays
light and works without any of them.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from ..contracts.errors import ConfigurationError
from ..contracts.gateway import ModelGateway
from ._providers import PROVIDERS, Provider

__all__ = ["PROVIDERS", "Provider", "resolve_model"]


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
        from ._openai import OpenAIGateway

        if prefix == "ollama":
            options.setdefault("base_url", os.environ.get("OLLAMA_BASE_URL", _OLLAMA_URL))
            options.setdefault("api_key", os.environ.get("OLLAMA_API_KEY", "ollama"))
            options.setdefault("provider", "ollama")
            options.setdefault("key_env", "OLLAMA_API_KEY")
        return OpenAIGateway(name, http_client=http_client, **options)
    if provider.gateway == "anthropic":
        from ._anthropic import AnthropicGateway

        return AnthropicGateway(name, http_client=http_client, **options)
    from ._pydantic_ai import PydanticAIGateway

    if provider.keys:
        options.setdefault("key_hint", " or ".join(provider.keys))
    return PydanticAIGateway(f"{provider.target}:{name}", http_client=http_client, **options)
