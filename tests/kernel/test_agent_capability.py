"""``agent.capability``: ``@capability`` that registers on the agent it is called on.

The agent is defined first, without capabilities; each decorated function becomes a capability
of it, built exactly as ``@capability`` builds one, so the manifest and the fingerprint equal
those of ``define_agent(capabilities=[...])`` and of the long form. A duplicate id is refused at
once; compile snapshots the definition, so a later registration is not part of a compiled agent.
"""

from __future__ import annotations

from typing import Any, assert_type

import pytest
from pydantic import BaseModel, Field, JsonValue

from intention_kernel.contracts import AgentCompilationError, ModelRequest
from intention_kernel.kernel import (
    AgentDefinition,
    Capability,
    CapabilityContext,
    CompiledAgent,
    Kernel,
    capability,
    define_agent,
    define_capability,
)
from intention_kernel.kernel._function_capability import Function
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway


class Ledger:
    """The host's typed dependency: it remembers the transfers it was asked for."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}

    async def send(self, to: str, eur: int, *, idempotency_key: str) -> dict[str, JsonValue]:
        self.sent[idempotency_key] = eur
        return {"transfer_id": f"TR-{to}-{eur}"}


class Transfer(BaseModel):
    transfer_id: str


def _bank() -> AgentDefinition:
    return define_agent(id="bank", version="1.0.0", description="Moves money.", deps_type=Ledger)


BANK = _bank()


@BANK.capability(id="money.send", effect="write", confirmation="required")
async def send(context: CapabilityContext[Ledger], to: str, eur: int) -> Transfer:
    """Send money to an account.

    Args:
        to: The receiving account, like ACC-2.
        eur: Whole euros to send.
    """
    effect = await context.run_effect(
        f"send:{to}:{eur}",
        lambda authority: context.deps.send(to, eur, idempotency_key=authority.idempotency_key),
    )
    return Transfer.model_validate(effect.value)


@BANK.capability
async def balance(context: CapabilityContext[Ledger], account: str) -> int:
    """Tell the balance of an account."""
    return 120


def _functions() -> tuple[Function, Function]:
    """``send`` and ``balance`` again, undecorated (their names give the input models' names)."""

    async def send(context: CapabilityContext[Ledger], to: str, eur: int) -> Transfer:
        """Send money to an account.

        Args:
            to: The receiving account, like ACC-2.
            eur: Whole euros to send.
        """
        raise AssertionError("never run: only the manifest is compared")

    async def balance(context: CapabilityContext[Ledger], account: str) -> int:
        """Tell the balance of an account."""
        raise AssertionError("never run: only the manifest is compared")

    return send, balance


async def _send_fn(context: CapabilityContext, to: str) -> str:
    """Send money."""
    return to


class SendInput(BaseModel):
    to: str = Field(description="The receiving account, like ACC-2.")
    eur: int = Field(description="Whole euros to send.")


class BalanceInput(BaseModel):
    account: str


class BalanceOutput(BaseModel):
    result: int


async def _never(context: CapabilityContext, input: Any) -> Any:
    raise AssertionError("never run: only the manifest is compared")


LONG = define_agent(
    id="bank",
    version="1.0.0",
    description="Moves money.",
    deps_type=Ledger,
    capabilities=[
        define_capability(
            id="money.send",
            version="1.0.0",
            description="Send money to an account.",
            input=SendInput,
            output=Transfer,
            effect="write",
            confirmation="required",
            execute=_never,
        ),
        define_capability(
            id="balance",
            version="1.0.0",
            description="Tell the balance of an account.",
            input=BalanceInput,
            output=BalanceOutput,
            execute=_never,
        ),
    ],
)


def _compose(request: ModelRequest) -> JsonValue:
    outcomes: Any = request.input["outcomes"]
    return {"text": " ".join(str(o["output"]) for o in outcomes) or "-", "citations": []}


def _compiled(agent: AgentDefinition, deps: object = None) -> CompiledAgent:
    intentions: JsonValue = [{"capability": "money.send", "input": {"to": "ACC-2", "eur": 50}}]
    model = ScriptedModelGateway({"interpret": {"intentions": intentions}, "compose": _compose})
    return Kernel(durability=MemoryDurability(), model=model, deps=deps).compile(agent)


def test_it_returns_the_capability_and_registers_it_in_order() -> None:
    assert_type(send, Capability)  # mypy strict: the decorated name is the capability
    assert_type(balance, Capability)
    assert isinstance(send, Capability) and send.id == "money.send"
    assert BANK.capabilities == (send, balance)
    assert send.problems == () and balance.problems == ()


def test_the_manifest_equals_define_agents_and_the_long_forms() -> None:
    send_fn, balance_fn = _functions()
    listed = define_agent(
        id="bank",
        version="1.0.0",
        description="Moves money.",
        deps_type=Ledger,
        capabilities=[
            capability(send_fn, id="money.send", effect="write", confirmation="required"),
            capability(balance_fn),
        ],
    )
    registered, by_list, long = _compiled(BANK), _compiled(listed), _compiled(LONG)
    assert registered.manifest == by_list.manifest == long.manifest
    assert registered.fingerprint == by_list.fingerprint == long.fingerprint


def test_a_duplicate_id_is_refused_and_nothing_is_registered() -> None:
    agent = _bank()
    agent.capability(_functions()[1], id="balance")
    with pytest.raises(AgentCompilationError) as refused:
        agent.capability(_send_fn, id="balance")
    assert [p["code"] for p in refused.value.context["problems"]] == ["duplicate_capability"]
    assert [c.id for c in agent.capabilities] == ["balance"]
    given = define_agent(
        id="bank", version="1.0.0", description="Moves money.", capabilities=[send]
    )
    with pytest.raises(AgentCompilationError):

        @given.capability(id="money.send")
        async def again(context: CapabilityContext, to: str) -> str:
            """Send again."""
            return to

    assert given.capabilities == (send,)


def test_compile_snapshots_the_definition() -> None:
    agent = _bank()
    send_fn, balance_fn = _functions()
    agent.capability(send_fn, id="money.send", effect="write", confirmation="required")
    before = _compiled(agent)
    late = agent.capability(balance_fn)
    assert agent.capabilities[-1] is late
    assert [c["id"] for c in before.manifest["capabilities"]] == ["money.send"]
    assert [c.id for c in before._runtime.definition.capabilities] == ["money.send"]
    assert list(before._runtime.capabilities) == ["money.send"]
    after = _compiled(agent)
    assert after.fingerprint != before.fingerprint
    assert after.fingerprint == _compiled(LONG).fingerprint


def test_what_cannot_be_derived_is_listed_at_compile() -> None:
    agent = _bank()

    @agent.capability(id="plain")  # type: ignore[arg-type]  # mypy refuses it too
    def plain(context: CapabilityContext, n: int) -> int:
        """Not async."""
        return n

    @agent.capability(id="named", input_name="not a name")
    async def named(context: CapabilityContext, n: int) -> int:
        """A bad input model name."""
        return n

    with pytest.raises(AgentCompilationError) as refused:
        _compiled(agent)
    problems = [(p["code"], p["where"]) for p in refused.value.context["problems"]]
    assert ("not_async", "capability 'plain'") in problems
    assert ("invalid_input_name", "capability 'named'") in problems


def test_local_classes_resolve_in_every_form() -> None:
    agent = define_agent(id="local", version="1.0.0", description="Local classes.")

    class Item(BaseModel):
        n: int

    @agent.capability
    async def bare(context: CapabilityContext, item: Item) -> Item:
        """Echo."""
        return item

    @agent.capability(id="called")
    async def called(context: CapabilityContext, item: Item) -> Item:
        """Echo."""
        return item

    async def direct_fn(context: CapabilityContext, item: Item) -> Item:
        """Echo."""
        return item

    direct = agent.capability(direct_fn, id="direct", input_name="Echo")
    assert [c.problems for c in agent.capabilities] == [(), (), ()]
    assert [c.id for c in agent.capabilities] == ["bare", "called", "direct"]
    assert direct.input_schema.model_json_schema()["title"] == "Echo"
    assert bare is agent.capabilities[0] and called is agent.capabilities[1]


async def test_a_registered_write_runs_under_consent_with_typed_deps() -> None:
    ledger = Ledger()
    desk = _compiled(BANK, deps=ledger)
    held = await desk.run(thread_id="t1", turn_id="turn-1", text="Send 50 to ACC-2")
    pending = held.checkpoint.interaction
    assert pending is not None and ledger.sent == {}
    selection = {"interaction_id": pending.id, "option": "yes"}
    done = await desk.run(thread_id="t1", turn_id="turn-2", text="", selection=selection)
    assert done.response.text == "{'transfer_id': 'TR-ACC-2-50'}"
    assert list(ledger.sent.values()) == [50]
