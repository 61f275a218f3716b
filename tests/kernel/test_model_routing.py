"""Per-task models (``define_agent(models=...)``), in the fingerprint; compile refuses what a
chosen provider cannot express."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, JsonValue

from intention_kernel.contracts import (
    AgentCompilationError,
    ConfigurationError,
    DurabilityStore,
    ModelRequest,
    ModelResponse,
)
from intention_kernel.examples.travel_desk import build_agent
from intention_kernel.kernel import Completed, Kernel, define_capability
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

from .support import FaqAnswer, Shop, cite_all, support_agent

LOOKUP: JsonValue = {"intentions": [{"capability": "orders.lookup", "input": {"order_id": "42"}}]}
SUPPORT_FINGERPRINT = "ik1-edf5de207f765f5e179aeca136d9e7838bad6b088b58d539642fbb5edb2a06e3"
DESK_FINGERPRINT = "ik1-46c638e1bf0da58e6a093b382aed6ed747e548a9b9519ee0215200cdd60ba2c9"
"""Fingerprints these agents had before per-task models existed: they must not move."""


class Dialected(ScriptedModelGateway):
    """A scripted gateway that says which provider schema dialect it follows."""

    def __init__(self, dialect: str, script: Any = None, *, provider: str = "acme") -> None:
        super().__init__(script)
        self.dialect = dialect
        self.provider = provider
        self.model = "m-1"


class Tags(BaseModel):
    labels: dict[str, str]


async def _noop(context: Any, query: Any) -> Completed:
    return Completed(output={"answer": "-"})


OPEN_INPUT = define_capability(
    id="tags.set",
    version="1.0.0",
    description="Set free-form labels.",
    input=Tags,
    output=FaqAnswer,
    execute=_noop,
)


def _kernel(model: Any = None) -> Kernel:
    return Kernel(durability=MemoryDurability(), model=model)


def test_unchanged_agents_keep_their_fingerprint() -> None:
    kernel = _kernel(ScriptedModelGateway())
    assert kernel.compile(support_agent()).fingerprint == SUPPORT_FINGERPRINT
    assert kernel.compile(build_agent()).fingerprint == DESK_FINGERPRINT


def test_per_task_models_are_part_of_the_fingerprint() -> None:
    kernel = _kernel(ScriptedModelGateway())
    a = support_agent(models={"compose": Dialected("openai", provider="openai")})
    b = support_agent(models={"compose": Dialected("openai", provider="anthropic")})
    c = support_agent(models={"interpret": Dialected("openai", provider="openai")})
    fingerprints = {kernel.compile(x).fingerprint for x in (a, b, c)}
    assert len(fingerprints) == 3 and SUPPORT_FINGERPRINT not in fingerprints
    again = support_agent(models={"compose": Dialected("openai", provider="openai")})
    assert kernel.compile(again).fingerprint == kernel.compile(a).fingerprint
    assert kernel.compile(a).manifest["models"] == {"compose": "openai:m-1"}


async def test_each_task_asks_its_own_model(durability: DurabilityStore) -> None:
    interpret = ScriptedModelGateway({"interpret": LOOKUP, "repair": LOOKUP})
    compose = ScriptedModelGateway({"compose": cite_all})
    fallback = ScriptedModelGateway({})
    kernel = Kernel(durability=durability, model=fallback, ports={"shop": Shop()})
    agent = kernel.compile(support_agent(models={"interpret": interpret, "compose": compose}))
    result = await agent.run(thread_id="t1", turn_id="turn-1", text="where is 42?")
    assert result.response.text == "Order 42 has shipped."
    assert [c.task for c in interpret.calls] == ["interpret"]
    assert [c.task for c in compose.calls] == ["compose"]
    assert fallback.calls == []
    assert interpret.calls[0].model is None  # a gateway object asks its own default model


async def test_repair_uses_the_interpret_model_then_the_default(
    durability: DurabilityStore,
) -> None:
    broken: JsonValue = {"intentions": [{"capability": "orders.lookup", "input": {}}]}
    interpret = ScriptedModelGateway({"interpret": broken, "repair": LOOKUP})
    default = ScriptedModelGateway({"compose": cite_all})
    kernel = Kernel(durability=durability, ports={"shop": Shop()})  # no kernel model at all
    agent = kernel.compile(support_agent(models={"interpret": interpret, "default": default}))
    result = await agent.run(thread_id="t1", turn_id="turn-1", text="where is 42?")
    assert result.response.text == "Order 42 has shipped."
    assert [c.task for c in interpret.calls] == ["interpret", "repair"]
    assert [c.task for c in default.calls] == ["compose"]


def test_model_strings_are_resolved_once_per_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    from intention_kernel.models import _resolve as resolving

    built: list[str] = []

    def fake(model: str, **options: Any) -> ScriptedModelGateway:
        built.append(model)
        return ScriptedModelGateway({})

    monkeypatch.setattr(resolving, "resolve_model", fake)
    kernel = _kernel()
    agent = support_agent(
        models={"default": "openai:gpt-4.1-mini", "interpret": "anthropic:claude-sonnet-4-5"}
    )
    first = kernel.compile(agent)
    kernel.compile(agent)
    assert built == ["anthropic:claude-sonnet-4-5", "openai:gpt-4.1-mini"]
    routes = first._runtime.routes
    assert routes["interpret"].gateway is routes["repair"].gateway is routes["select"].gateway
    assert routes["compose"].model == "openai:gpt-4.1-mini"  # sent as ModelRequest.model
    assert first.manifest["models"] == {
        "default": "openai:gpt-4.1-mini",
        "interpret": "anthropic:claude-sonnet-4-5",
    }


def test_a_model_string_without_its_key_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError) as info:
        _kernel().compile(support_agent(models={"default": "openai:gpt-4.1-mini"}))
    assert "OPENAI_API_KEY" in info.value.message
    with pytest.raises(ConfigurationError):
        Kernel(durability=MemoryDurability(), model="openai:gpt-4.1-mini")


def test_the_kernel_model_may_be_a_model_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")
    kernel = Kernel(durability=MemoryDurability(), model="openai:gpt-4.1-mini")
    assert getattr(kernel.model, "dialect", None) == "openai"
    agent = kernel.compile(support_agent())
    assert agent.fingerprint == SUPPORT_FINGERPRINT  # the kernel's model is not per agent
    assert agent._runtime.routes["interpret"].model == "openai:gpt-4.1-mini"


def test_model_problems_are_listed_with_the_others() -> None:
    agent = support_agent(
        version="one",
        models={"interpet": ScriptedModelGateway(), "compose": 42, "default": "gpt-4"},
    )
    with pytest.raises(AgentCompilationError) as info:
        _kernel().compile(agent)
    codes = {(p["code"], p["where"]) for p in info.value.context["problems"]}
    assert {
        ("invalid_version", "agent"),
        ("unknown_model_task", "models['interpet']"),
        ("invalid_model", "models['compose']"),
        ("invalid_model", "models['default']"),
        ("no_model", "models['compose']"),
    } <= codes


def test_compile_refuses_an_input_schema_the_chosen_provider_cannot_express() -> None:
    agent = support_agent([OPEN_INPUT], version="one")
    with pytest.raises(AgentCompilationError) as info:
        _kernel(Dialected("openai")).compile(agent)
    problems = info.value.context["problems"]
    refused = [p for p in problems if p["code"] == "schema_not_expressible"]
    assert refused == [
        {
            "code": "schema_not_expressible",
            "where": "capability 'tags.set'",
            "message": "the input schema cannot be expressed for acme:m-1 (openai dialect): "
            "/properties/labels: an open object (free-form keys) cannot be expressed",
        }
    ]
    assert ("invalid_version", "agent") in {(p["code"], p["where"]) for p in problems}


def test_only_the_providers_that_read_capability_inputs_are_checked() -> None:
    agent = support_agent([OPEN_INPUT])
    assert _kernel(Dialected("anthropic")).compile(agent).fingerprint
    assert _kernel(ScriptedModelGateway()).compile(agent).fingerprint  # no dialect: not checked
    composing = support_agent([OPEN_INPUT], models={"compose": Dialected("openai")})
    assert _kernel(ScriptedModelGateway()).compile(composing).fingerprint
    interpreting = support_agent([OPEN_INPUT], models={"interpret": Dialected("gemini")})
    assert _kernel(ScriptedModelGateway()).compile(interpreting).fingerprint
    strict = support_agent([OPEN_INPUT], models={"repair": Dialected("openai")})
    with pytest.raises(AgentCompilationError):
        _kernel(ScriptedModelGateway()).compile(strict)


def test_every_capability_of_the_examples_is_strict_expressible() -> None:
    for agent in (support_agent(), build_agent()):
        for dialect in ("openai", "anthropic", "gemini"):
            assert _kernel(Dialected(dialect)).compile(agent).fingerprint


async def test_a_per_task_gateway_receives_the_branched_schema(
    durability: DurabilityStore,
) -> None:
    seen: list[Any] = []

    def interpret(request: ModelRequest) -> ModelResponse:
        seen.append(request.output_schema)
        return ModelResponse(output=LOOKUP)

    gateway = ScriptedModelGateway({"interpret": interpret, "compose": cite_all})
    kernel = Kernel(durability=durability, model=gateway, ports={"shop": Shop()})
    agent = kernel.compile(support_agent())
    await agent.run(thread_id="t1", turn_id="turn-1", text="where is 42?")
    from intention_kernel.models import check_schema

    [schema] = seen
    assert check_schema("openai", schema) == []  # every intention is one capability's input
    branches = schema["properties"]["intentions"]["items"]["anyOf"]
    ids = [b["properties"]["capability"]["const"] for b in branches]
    assert ids == ["orders.lookup", "shipping.track", "faq.search", "store.hours"]
