"""The travel desk end to end on each real gateway, over a fake provider server.

Each fake server recognises the kernel's task by the answer's name (the response format, the
forced tool, the output function), reads the kernel's input back from the user message, and
answers what the travel desk's scripted model would, in the provider's own format. So every
request and answer crosses the real SDK and the gateway's mapping both ways.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from pydantic import BaseModel, JsonValue
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.providers.google import GoogleProvider

from intention_kernel.contracts.errors import AgentCompilationError, ModelGatewayError
from intention_kernel.contracts.gateway import ModelGateway, ModelRequest
from intention_kernel.examples.travel_desk import FakeHotelProvider, build_agent
from intention_kernel.examples.travel_desk._model import compose, interpret
from intention_kernel.kernel import (
    AgentDefinition,
    Completed,
    Kernel,
    TurnCompleted,
    TurnResult,
    TurnUsage,
    define_agent,
    define_capability,
)
from intention_kernel.models import AnthropicGateway, OpenAIGateway, PydanticAIGateway
from intention_kernel.testing import EventCollector, MemoryDurability

from .fakes import (
    FakeServer,
    anthropic_events,
    anthropic_tool,
    anthropic_tool_block,
    gemini_call,
    openai_body,
    openai_error,
    openai_json,
    sse,
)

HOST = {"actor": "ann@example.com", "tenant": "acme"}


def desk_answer(task: str, user: str) -> JsonValue:
    request = ModelRequest(task=task, input=json.loads(user))
    return compose(request) if task == "compose" else interpret(request)


def openai_desk(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    task = body["response_format"]["json_schema"]["name"]
    return openai_json(desk_answer(task, body["messages"][-1]["content"]))


def anthropic_desk(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    task = body["tool_choice"]["name"]
    return anthropic_tool(task, desk_answer(task, body["messages"][-1]["content"]))


def gemini_desk(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    task = body["tools"][0]["functionDeclarations"][0]["name"]
    return gemini_call(task, desk_answer(task, body["contents"][-1]["parts"][0]["text"]))


def openai_gateway(client: httpx2.AsyncClient) -> ModelGateway:
    return OpenAIGateway("gpt-4.1-mini", api_key="sk-test", http_client=client)


def anthropic_gateway(client: httpx2.AsyncClient) -> ModelGateway:
    return AnthropicGateway("claude-sonnet-4-5", api_key="sk-ant-test", http_client=client)


def gemini_gateway(client: httpx2.AsyncClient) -> ModelGateway:
    provider = GoogleProvider(api_key="AIza-test", http_client=client)
    return PydanticAIGateway(GoogleModel("gemini-3.5-flash-lite", provider=provider))


Setup = tuple[Callable[[httpx2.Request], httpx2.Response], Callable[[httpx2.AsyncClient], Any]]
SETUPS: dict[str, Setup] = {
    "openai": (openai_desk, openai_gateway),
    "anthropic": (anthropic_desk, anthropic_gateway),
    "gemini": (gemini_desk, gemini_gateway),
}


def task_of(request: httpx2.Request) -> str:
    body = json.loads(request.content)
    if "response_format" in body:
        return str(body["response_format"]["json_schema"]["name"])
    if "tool_choice" in body:
        return str(body["tool_choice"]["name"])
    return str(body["tools"][0]["functionDeclarations"][0]["name"])


@pytest.mark.parametrize("name", list(SETUPS))
async def test_the_travel_desk_conversation(name: str) -> None:
    answer, build = SETUPS[name]
    server = FakeServer(answer)
    hotels = FakeHotelProvider()
    durability = MemoryDurability()
    kernel = Kernel(durability=durability, model=build(server.client()), ports={"hotels": hotels})
    agent = kernel.compile(build_agent())

    async def say(
        turn: str, text: str, selection: dict[str, JsonValue] | None = None
    ) -> TurnResult:
        return await agent.run(
            thread_id="t1", turn_id=turn, text=text, selection=selection, host_context=HOST
        )

    try:
        found = await say("1", "Find me a hotel in Lisbon for 2 nights")
        assert "Alfama Inn (120 EUR/night)" in found.response.text
        assert [task_of(r) for r in server.requests] == ["interpret", "compose"]
        quoted = await say("2", "How much is the Alfama Inn?")
        assert "240 EUR" in quoted.response.text

        held = await say("3", "Book it")
        interaction = held.checkpoint.interaction
        assert interaction is not None
        assert "quote_id: Q-alfama-inn-2n" in interaction.prompt
        assert hotels.total_calls() == 0

        faq = await say("4", "Is breakfast included?")
        assert "Breakfast is included at every hotel we book." in faq.response.text
        assert faq.checkpoint.interaction == interaction

        selection: dict[str, JsonValue] = {"interaction_id": interaction.id, "option": "yes"}
        booked = await say("5", "", selection)
        assert booked.response.text == "Booked: Alfama Inn, 2 nights, 240 EUR (booking BK-1001)."
        assert hotels.total_calls() == 1

        sent = len(server.requests)
        again = await say("5", "", selection)
        assert again.replayed is True
        assert again.response == booked.response
        assert len(server.requests) == sent  # a replay asks no model: zero tokens
        assert hotels.total_calls() == 1
    finally:
        await durability.close()


def refusing(*tasks: str) -> Callable[[httpx2.Request], httpx2.Response]:
    """The desk server, except that the model refuses the ``tasks``' requests."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        if task_of(request) in tasks:
            return openai_body(None, refusal="I can't help with that.")
        return openai_desk(request)

    return answer


@pytest.mark.parametrize(
    ("tasks", "kind", "text"),
    [
        (("interpret", "repair"), "clarification", "Could you say it another way?"),
        (("compose",), "fallback", "Alfama Inn (120 EUR/night)"),
    ],
)
async def test_a_refusal_ends_in_a_safe_answer(
    tasks: tuple[str, ...], kind: str, text: str
) -> None:
    server = FakeServer(refusing(*tasks))
    durability = MemoryDurability()
    kernel = Kernel(
        durability=durability,
        model=openai_gateway(server.client()),
        ports={"hotels": FakeHotelProvider()},
    )
    agent = kernel.compile(build_agent())
    try:
        result = await agent.run(
            thread_id="t1",
            turn_id="1",
            text="Find me a hotel in Lisbon for 2 nights",
            host_context=HOST,
        )
    finally:
        await durability.close()
    assert result.response.kind == kind
    assert text in result.response.text
    assert "I can't help with that." not in result.response.text
    # A refusal is not repaired or recomposed: the same question would be refused again.
    asked = [task_of(r) for r in server.requests]
    assert asked == (["interpret"] if "interpret" in tasks else ["interpret", "compose"])


async def test_a_rejected_key_fails_the_turn_without_a_retry() -> None:
    server = FakeServer(openai_error(401, "Incorrect API key provided: sk-tes*****", "auth"))
    durability = MemoryDurability()
    hotels = FakeHotelProvider()
    kernel = Kernel(
        durability=durability, model=openai_gateway(server.client()), ports={"hotels": hotels}
    )
    agent = kernel.compile(build_agent())
    try:
        with pytest.raises(ModelGatewayError) as raised:
            await agent.run(
                thread_id="t1", turn_id="1", text="Find a hotel in Porto", host_context=HOST
            )
    finally:
        await durability.close()
    assert raised.value.retryable is False
    assert "OPENAI_API_KEY" in raised.value.message
    assert len(server.requests) == 1 and hotels.total_calls() == 0


def desk_with(**overrides: Any) -> AgentDefinition:
    """The travel desk with some of its definition replaced."""
    desk = build_agent()
    spec: dict[str, Any] = {
        "id": desk.id,
        "version": desk.version,
        "description": desk.description,
        "instructions": desk.instructions,
        "capabilities": desk.capabilities,
        "policies": desk.policies,
    }
    return define_agent(**{**spec, **overrides})


async def test_per_task_models_on_two_providers_with_usage_and_a_free_replay() -> None:
    openai_server = FakeServer(openai_desk)
    anthropic_server = FakeServer(anthropic_desk)
    durability = MemoryDurability()
    hotels = FakeHotelProvider()
    collector = EventCollector()
    kernel = Kernel(durability=durability, ports={"hotels": hotels}, sinks=[collector])
    models = {
        "interpret": openai_gateway(openai_server.client()),
        "compose": anthropic_gateway(anthropic_server.client()),
    }
    agent = kernel.compile(desk_with(models=models))
    try:
        found = await agent.run(
            thread_id="t1", turn_id="1", text="Find me a hotel in Lisbon for 2 nights"
        )
        again = await agent.run(
            thread_id="t1", turn_id="1", text="Find me a hotel in Lisbon for 2 nights"
        )
    finally:
        await durability.close()
    assert "Alfama Inn (120 EUR/night)" in found.response.text
    assert [task_of(r) for r in openai_server.requests] == ["interpret"]
    assert [task_of(r) for r in anthropic_server.requests] == ["compose"]
    # The interpretation schema the OpenAI gateway sent is strict: one branch per capability.
    sent = json.loads(openai_server.requests[0].content)["response_format"]["json_schema"]
    assert sent["strict"] is True
    completed = [e.data for e in collector.of_type("model.completed")]
    assert [(d["task"], d["provider"]) for d in completed] == [
        ("interpret", "openai"),
        ("compose", "anthropic"),
    ]
    assert completed[0]["model"] == "gpt-4.1-mini-2025-04-14"
    assert (completed[0]["input_tokens"], completed[0]["output_tokens"]) == (120, 30)
    assert (completed[1]["input_tokens"], completed[1]["output_tokens"]) == (100, 40)
    assert found.usage == TurnUsage(input_tokens=220, output_tokens=70, model_calls=2)
    invoked = collector.of_type("model.invoked")
    assert [(e.data["provider"], e.data["model"]) for e in invoked] == [
        ("openai", "openai:gpt-4.1-mini"),
        ("anthropic", "anthropic:claude-sonnet-4-5"),
    ]
    assert again.replayed and again.usage == TurnUsage()
    assert len(openai_server.requests) == 1 and len(anthropic_server.requests) == 1


class Labels(BaseModel):
    labels: dict[str, str]


async def _labelled(context: Any, query: Labels) -> Completed:
    return Completed(output={"labels": query.labels})


def test_compile_refuses_a_capability_the_openai_dialect_cannot_express() -> None:
    server = FakeServer(openai_desk)
    free_form = define_capability(
        id="desk.label",
        version="1.0.0",
        description="Label the stay.",
        input=Labels,
        output=Labels,
        execute=_labelled,
    )
    agent = desk_with(capabilities=[*build_agent().capabilities, free_form])
    kernel = Kernel(durability=MemoryDurability(), model=openai_gateway(server.client()))
    with pytest.raises(AgentCompilationError) as raised:
        kernel.compile(agent)
    [problem] = raised.value.context["problems"]
    assert problem["code"] == "schema_not_expressible"
    assert problem["where"] == "capability 'desk.label'"
    assert "openai:gpt-4.1-mini (openai dialect)" in problem["message"]
    assert "/properties/labels" in problem["message"]
    anthropic = Kernel(durability=MemoryDurability(), model=anthropic_gateway(server.client()))
    assert anthropic.compile(agent).fingerprint  # a forced tool call can carry it
    assert server.requests == []


async def test_malformed_streamed_tool_json_gets_the_kernels_one_recomposition() -> None:
    # Streamed, Anthropic's compose answer is tool input that is not JSON: the gateway answers
    # without output (as complete does), so the kernel recomposes once instead of the gateway
    # retrying the same request as a server fault.
    asked: list[str] = []

    def desk(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        task = body["tool_choice"]["name"]
        user = body["messages"][-1]["content"]
        asked.append(task if "problems" not in json.loads(user) else f"{task} again")
        if not body.get("stream"):
            return anthropic_tool(task, desk_answer(task, user))
        if task == "compose" and "problems" not in json.loads(user):
            opened = anthropic_events([anthropic_tool_block("compose", {})], upto=4)
            broken = {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"text": ]'},
            }
            ended = anthropic_events([anthropic_tool_block("compose", {})])[5:]
            return sse([*opened, ("content_block_delta", broken), *ended])
        return sse(anthropic_events([anthropic_tool_block(task, desk_answer(task, user))]))

    server = FakeServer(desk)
    gateway = AnthropicGateway(
        "claude-sonnet-4-5", api_key="sk-ant-test", http_client=server.client()
    )
    kernel = Kernel(
        durability=MemoryDurability(), model=gateway, ports={"hotels": FakeHotelProvider()}
    )
    agent = kernel.compile(build_agent())
    items = [
        item
        async for item in agent.stream(
            thread_id="t1",
            turn_id="1",
            text="Find me a hotel in Lisbon for 2 nights",
            host_context=HOST,
        )
    ]
    [done] = [i for i in items if isinstance(i, TurnCompleted)]
    assert "Alfama Inn (120 EUR/night)" in done.result.response.text
    assert done.result.response.kind == "answer"
    assert asked == ["interpret", "compose", "compose again"]
