"""The tool loop through the real OpenAI and Anthropic SDKs: the provider server answers each
round from the kernel's input it reads back, so the balance the model decides on crossed the
SDK and the gateway's mapping both ways (structured output with ``more``, then ``results``)."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx2
import pytest
from pydantic import JsonValue

from intention_kernel.contracts.gateway import ModelGateway
from intention_kernel.testing import MemoryDurability

from ..kernel.tool_loop import CHECK_AND_SEND, Bank, bank_desk, loop_compose, loop_interpret
from .fakes import FakeServer, anthropic_tool, openai_json
from .test_travel_desk import anthropic_gateway, openai_gateway, task_of


def _answer(task: str, user: str) -> JsonValue:
    given = json.loads(user)
    return loop_compose(given) if task == "compose" else loop_interpret(given)


def _openai(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    return openai_json(_answer(task_of(request), body["messages"][-1]["content"]))


def _anthropic(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    task = task_of(request)
    return anthropic_tool(task, _answer(task, body["messages"][-1]["content"]))


Build = Callable[[httpx2.AsyncClient], ModelGateway]
PROVIDERS: dict[str, tuple[Callable[[httpx2.Request], httpx2.Response], Build]] = {
    "openai": (_openai, openai_gateway),
    "anthropic": (_anthropic, anthropic_gateway),
}


@pytest.mark.parametrize("name", list(PROVIDERS))
@pytest.mark.parametrize("funds", [150, 80])
async def test_the_model_decides_the_transfer_from_the_balance_it_was_shown(
    name: str, funds: int
) -> None:
    answer, build = PROVIDERS[name]
    server = FakeServer(answer)
    desk = bank_desk(
        MemoryDurability(), build(server.client()), bank=Bank(balances={"ACC-1": funds, "ACC-2": 0})
    )

    held = await desk.agent.run(thread_id="t", turn_id="1", text=CHECK_AND_SEND)

    assert [task_of(r) for r in server.requests] == ["interpret", "interpret", "compose"]
    shown = json.loads(server.body(1)["messages"][-1]["content"])  # what round 2 was shown
    assert shown["results"][0]["output"] == {"result": funds}
    if funds < 100:
        assert held.checkpoint.interaction is None and desk.bank.calls == []
        return
    interaction = held.checkpoint.interaction
    assert interaction is not None and desk.bank.calls == []
    selection: dict[str, JsonValue] = {"interaction_id": interaction.id, "option": "yes"}
    await desk.agent.run(thread_id="t", turn_id="2", text="", selection=selection)
    assert len(desk.bank.calls) == 1 and desk.bank.balances["ACC-2"] == 50
