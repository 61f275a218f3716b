"""``resolve_model``: model strings to gateways, and the errors a user sees when one is wrong."""

from __future__ import annotations

import subprocess
import sys

import pytest

import intention_kernel.models._resolve as resolve_module
from intention_kernel.contracts.errors import ConfigurationError, ErrorCode
from intention_kernel.contracts.gateway import ModelRequest
from intention_kernel.models import (
    PROVIDERS,
    AnthropicGateway,
    OpenAIGateway,
    PydanticAIGateway,
    resolve_model,
)

from .fakes import FakeServer, openai_json

ALL_KEYS = sorted({key for provider in PROVIDERS.values() for key in provider.keys})


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with no provider key set, whatever the machine has."""
    for key in [*ALL_KEYS, "OPENAI_BASE_URL", "OLLAMA_BASE_URL", "ANTHROPIC_BASE_URL"]:
        monkeypatch.delenv(key, raising=False)


def test_with_no_key_set_the_error_names_the_variable() -> None:
    with pytest.raises(ConfigurationError) as raised:
        resolve_model("openai:gpt-4.1-mini")
    error = raised.value
    assert error.code == ErrorCode.INVALID_CONFIGURATION
    assert error.message == "'openai:gpt-4.1-mini' needs an API key: set OPENAI_API_KEY"
    assert error.context["env"] == ["OPENAI_API_KEY"]


@pytest.mark.parametrize(
    ("model", "variables"),
    [
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN"),
        ("google-gla:gemini-3.5-flash-lite", "GOOGLE_API_KEY or GEMINI_API_KEY"),
    ],
)
def test_every_provider_names_its_own_variables(model: str, variables: str) -> None:
    with pytest.raises(ConfigurationError, match=f"set {variables}$"):
        resolve_model(model)


def test_a_gateway_built_without_a_key_says_the_same() -> None:
    with pytest.raises(ConfigurationError, match="set OPENAI_API_KEY or pass api_key"):
        OpenAIGateway("gpt-4.1-mini")
    with pytest.raises(ConfigurationError, match="set ANTHROPIC_API_KEY or pass api_key"):
        AnthropicGateway("claude-sonnet-4-5")


@pytest.mark.parametrize("model", ["gpt-4.1-mini", "openai:", ":gpt-4.1"])
def test_a_model_string_names_its_provider(model: str) -> None:
    with pytest.raises(ConfigurationError, match="a model string is provider:model"):
        resolve_model(model)


def test_an_unknown_provider_lists_the_known_ones() -> None:
    with pytest.raises(ConfigurationError) as raised:
        resolve_model("openia:gpt-4.1-mini")
    assert raised.value.message.startswith("unknown model provider 'openia'; known: anthropic,")
    assert "openai" in raised.value.context["prefixes"]


def test_a_missing_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setattr(resolve_module, "_installed", lambda module: module != "openai")
    with pytest.raises(ConfigurationError) as raised:
        resolve_model("openai:gpt-4.1-mini")
    assert raised.value.message == (
        "'openai:gpt-4.1-mini' needs openai: pip install \"intention-kernel[openai]\""
    )


def test_a_provider_sdk_pydantic_ai_needs_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolve_module, "_installed", lambda module: module != "groq")
    with pytest.raises(ConfigurationError) as raised:
        resolve_model("groq:llama-3.3-70b-versatile")
    assert "pydantic-ai-slim[groq]" in raised.value.message


@pytest.mark.parametrize(
    ("model", "env", "kind"),
    [
        ("openai:gpt-4.1-mini", "OPENAI_API_KEY", OpenAIGateway),
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY", AnthropicGateway),
        ("google-gla:gemini-3.5-flash-lite", "GEMINI_API_KEY", PydanticAIGateway),
        ("google:gemini-3.5-flash-lite", "GOOGLE_API_KEY", PydanticAIGateway),
    ],
)
def test_each_known_string_resolves_to_its_gateway(
    monkeypatch: pytest.MonkeyPatch, model: str, env: str, kind: type
) -> None:
    monkeypatch.setenv(env, "test-key")
    gateway = resolve_model(model, max_tokens=256)
    assert isinstance(gateway, kind)
    assert getattr(gateway, "dialect", None) == PROVIDERS[model.partition(":")[0]].dialect


async def test_a_resolved_gateway_sends_to_its_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server = FakeServer(openai_json({"text": "ok"}))
    gateway = resolve_model("openai:gpt-4.1-mini", http_client=server.client())
    response = await gateway.complete(ModelRequest(task="compose"))
    assert response.output == {"text": "ok"}
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"
    assert server.body()["model"] == "gpt-4.1-mini"


async def test_ollama_needs_no_key() -> None:
    server = FakeServer(openai_json({"text": "ok"}, model="llama3.2:3b"))
    gateway = resolve_model("ollama:llama3.2:3b", http_client=server.client())
    response = await gateway.complete(ModelRequest(task="compose"))
    assert str(server.requests[0].url) == "http://localhost:11434/v1/chat/completions"
    assert server.body()["model"] == "llama3.2:3b"
    assert response.provider == "ollama"


def test_importing_the_package_imports_no_sdk() -> None:
    code = (
        "import sys, intention_kernel, intention_kernel.models\n"
        "loaded = [m for m in ('openai', 'anthropic', 'pydantic_ai', 'google.genai')"
        " if m in sys.modules]\n"
        "print(loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_a_pydantic_ai_model_string_without_its_key_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="GOOGLE_API_KEY"):
        PydanticAIGateway("google:gemini-3.5-flash-lite")
    with pytest.raises(ConfigurationError, match="Unknown model"):
        PydanticAIGateway("nosuch:model")


def test_provider_messages_are_redacted() -> None:
    from intention_kernel.models._common import redact

    said = (
        "key sk-proj-abcdef123456 or AIzaSyAbcdefghijklmnop, Bearer abc.def and api_key=XYZ12345678"
    )
    assert redact(said) == "key [redacted] or [redacted], [redacted] and [redacted]"
    assert redact("x" * 500, limit=20) == "x" * 17 + "..."
