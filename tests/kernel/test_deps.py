"""Typed dependencies: ``define_agent(deps_type=...)``, ``Kernel(deps=...)`` and ``run(deps=...)``.

A capability's ``CapabilityContext[Bank]`` types ``context.deps`` (mypy strict checks this file);
the run's deps replace the kernel's, a worker's turn uses the kernel's (deps are never stored),
and deps of the wrong type are refused before the turn starts with ``INVALID_DEPS``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import (
    AgentCompilationError,
    ConfigurationError,
    ErrorCode,
    ModelRequest,
)
from intention_kernel.kernel import (
    CapabilityContext,
    CompiledAgent,
    Kernel,
    TurnCompleted,
    capability,
    define_agent,
)
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway


class Bank:
    """The host's typed dependency."""

    def __init__(self, eur: int) -> None:
        self.eur = eur
        self.calls = 0

    async def balance(self, account: str) -> int:
        self.calls += 1
        return self.eur


@capability(id="accounts.balance")
async def balance(context: CapabilityContext[Bank], account: str) -> int:
    """Tell the balance of an account.

    Args:
        account: The account's id, like ACC-1.
    """
    eur: int = await context.deps.balance(account)  # typed: mypy knows Bank.balance
    assert context.ports["audit"] == "kept"  # ports keep working beside deps
    return eur


AGENT = define_agent(
    id="bank",
    version="1.0.0",
    description="Answers balance questions.",
    capabilities=[balance],
    deps_type=Bank,
)


def _compose(request: ModelRequest) -> JsonValue:
    outcomes: Any = request.input["outcomes"]
    return {"text": " ".join(str(o["output"]) for o in outcomes) or "-", "citations": []}


def _agent(deps: object = None, agent: Any = AGENT) -> CompiledAgent:
    model = ScriptedModelGateway(
        {
            "interpret": {
                "intentions": [{"capability": "accounts.balance", "input": {"account": "ACC-1"}}]
            },
            "compose": _compose,
        }
    )
    kernel = Kernel(durability=MemoryDurability(), model=model, ports={"audit": "kept"}, deps=deps)
    return kernel.compile(agent)


async def test_a_capability_reads_the_kernels_typed_deps() -> None:
    bank = Bank(120)
    result = await _agent(bank).run(thread_id="t1", turn_id="u1", text="balance?")
    assert result.response.text == "{'result': 120}"
    assert bank.calls == 1


async def test_the_runs_deps_replace_the_kernels_for_that_run() -> None:
    kernels, runs = Bank(1), Bank(80)
    agent = _agent(kernels)
    result = await agent.run(thread_id="t1", turn_id="u1", text="balance?", deps=runs)
    assert result.response.text == "{'result': 80}"
    assert (kernels.calls, runs.calls) == (0, 1)
    streamed = [
        item
        async for item in agent.stream(thread_id="t1", turn_id="u2", text="balance?", deps=runs)
    ]
    last = streamed[-1]
    assert isinstance(last, TurnCompleted) and last.result.response.text == "{'result': 80}"
    after = await agent.run(thread_id="t1", turn_id="u3", text="balance?")
    assert after.response.text == "{'result': 1}"


@pytest.mark.parametrize("deps", [None, "a bank", 42])
async def test_deps_of_the_wrong_type_are_refused_before_the_turn(deps: object) -> None:
    agent = _agent()
    with pytest.raises(ConfigurationError) as caught:
        await agent.run(thread_id="t1", turn_id="u1", text="balance?", deps=deps)
    assert caught.value.code is ErrorCode.INVALID_DEPS
    assert caught.value.context["expected"] == "Bank"
    store: Any = agent.durability
    assert await store.get_turn("t1", "u1") is None  # nothing was written
    wrong_kernel = _agent("not a bank")
    with pytest.raises(ConfigurationError) as again:
        await wrong_kernel.run(thread_id="t1", turn_id="u1", text="balance?")
    assert again.value.code is ErrorCode.INVALID_DEPS


async def test_an_agent_without_a_deps_type_takes_any_deps() -> None:
    free = define_agent(id="bank", version="1.0.0", description="-", capabilities=[balance])
    result = await _agent(Bank(7), free).run(thread_id="t1", turn_id="u1", text="balance?")
    assert result.response.text == "{'result': 7}"


async def test_deps_are_not_part_of_the_fingerprint() -> None:
    free = define_agent(id="bank", version="1.0.0", description="-", capabilities=[balance])
    typed = define_agent(
        id="bank", version="1.0.0", description="-", capabilities=[balance], deps_type=Bank
    )
    assert _agent(None, free).fingerprint == _agent(Bank(1), typed).fingerprint


def test_a_deps_type_that_is_not_a_class_is_a_compile_problem() -> None:
    bad = define_agent(
        id="bank",
        version="1.0.0",
        description="-",
        capabilities=[balance],
        deps_type="Bank",  # type: ignore[arg-type]
    )
    with pytest.raises(AgentCompilationError) as caught:
        _agent(Bank(1), bad)
    codes = [p["code"] for p in caught.value.context["problems"]]
    assert codes == ["invalid_deps_type"]


async def test_a_workers_turn_uses_the_kernels_deps() -> None:
    bank = Bank(55)
    agent = _agent(bank)
    await agent.submit(thread_id="t1", turn_id="u1", text="balance?")
    worker = agent.worker(poll_interval=0.05, claim_ttl=2.0)
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):
            items = [w.item async for w in agent.watch(thread_id="t1", turn_id="u1")]
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    last = items[-1]
    assert isinstance(last, TurnCompleted) and last.result.response.text == "{'result': 55}"
    replayed = await agent.run(thread_id="t1", turn_id="u1", text="balance?")
    assert replayed.replayed and replayed.response.text == "{'result': 55}"
    assert bank.calls == 1
