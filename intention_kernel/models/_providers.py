"""The model-string prefixes and what each needs: the table ``resolve_model`` reads.

Why its own module: the gateways' shared helpers name the provider's key variables from it, and
``resolve`` builds the gateways, so the table sits below both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._schemas import Dialect

__all__ = ["PROVIDERS", "Provider"]


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
