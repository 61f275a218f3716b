"""A small bank agent for the tool-loop tests: a balance read and a transfer under consent,
and a model that decides the transfer only once it has seen the balance."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import JsonValue

from intention_kernel.contracts import DurabilityStore
from intention_kernel.contracts.gateway import ModelGateway, ModelRequest
from intention_kernel.kernel import (
    CapabilityContext,
    CompiledAgent,
    Completed,
    Kernel,
    KernelLimits,
    ProducedFact,
    capability,
    define_agent,
)
from intention_kernel.testing import EventCollector

CHECK_AND_SEND = "check ACC-1's balance and, if it is over 100, send 50 to ACC-2"


@dataclass
class Bank:
    """The provider: balances, and transfers applied once per idempotency key."""

    balances: dict[str, int] = field(default_factory=lambda: {"ACC-1": 150, "ACC-2": 0})
    transfers: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def balance(self, account: str) -> int:
        return self.balances[account]

    def transfer(self, key: str, source: str, target: str, amount: int) -> str:
        self.calls.append(key)
        if key not in self.transfers:
            self.transfers[key] = (source, target, amount)
            self.balances[source] -= amount
            self.balances[target] += amount
        return f"TR-{len(self.transfers)}"


@capability(id="bank.balance", provides=("balance@1",))
async def balance(context: CapabilityContext[Bank], account: str) -> int | Completed:
    """Read an account's balance."""
    amount = context.deps.balance(account)
    return Completed(
        output={"result": amount}, facts=(ProducedFact("balance@1", amount, key=account),)
    )


@capability(id="bank.transfer", effect="write", confirmation="required", requires=("balance@1",))
async def transfer(context: CapabilityContext[Bank], source: str, target: str, amount: int) -> str:
    """Send money from one account to another (after its balance was read)."""
    return await _transfer(context, source, target, amount)


async def _transfer(context: CapabilityContext[Bank], source: str, target: str, amount: int) -> str:
    effect = await context.run_effect(
        f"transfer:{source}:{target}:{amount}",
        lambda authority: _send(context.deps, authority.idempotency_key, source, target, amount),
    )
    return str(effect.value)


async def _send(bank: Bank, key: str, source: str, target: str, amount: int) -> JsonValue:
    return bank.transfer(key, source, target, amount)


AGENT = define_agent(
    id="bank",
    version="1.0.0",
    description="Reads balances and sends money.",
    capabilities=[balance, transfer],
    deps_type=Bank,
)

BALANCE: dict[str, JsonValue] = {"capability": "bank.balance", "input": {"account": "ACC-1"}}
TRANSFER: dict[str, JsonValue] = {
    "capability": "bank.transfer",
    "input": {"source": "ACC-1", "target": "ACC-2", "amount": 50},
}


def loop_interpret(input: dict[str, JsonValue]) -> JsonValue:
    """What a model that loops answers to the kernel's ``interpret`` input: the balance first
    (asking to see it), then the transfer only if the balance it was shown is over 100."""
    if input["text"] != CHECK_AND_SEND:
        return {"intentions": [], "answer": {"option": "yes"}, "reply": None}
    results = input.get("results")
    if results is None:
        return {"intentions": [BALANCE], "more": True}
    assert isinstance(results, list)
    [seen] = [r for r in results if isinstance(r, dict) and r["capability_id"] == "bank.balance"]
    assert isinstance(seen, dict) and isinstance(seen["output"], dict)
    over = int(str(seen["output"]["result"])) > 100
    return {"intentions": [TRANSFER] if over else [], "more": False}


def loop_compose(input: dict[str, JsonValue]) -> JsonValue:
    """A composing model that repeats each completed outcome and cites its evidence."""
    outcomes = input["outcomes"]
    assert isinstance(outcomes, list)
    done = [o for o in outcomes if isinstance(o, dict) and o["status"] == "completed"]
    said = [f"{o['capability_id']}: {o['output']}" for o in done]
    text = "; ".join(said) or "Nothing to do."
    return {"text": text, "citations": [str(o["evidence_id"]) for o in done if o["evidence_id"]]}


def scripted(request: ModelRequest) -> JsonValue:
    assert isinstance(request.input, dict)
    return (
        loop_compose(request.input) if request.task == "compose" else loop_interpret(request.input)
    )


@dataclass
class BankDesk:
    agent: CompiledAgent
    bank: Bank
    events: EventCollector


def bank_desk(
    durability: DurabilityStore,
    gateway: ModelGateway,
    *,
    bank: Bank | None = None,
    limits: KernelLimits | None = None,
) -> BankDesk:
    bank = bank or Bank()
    events = EventCollector()
    kernel = Kernel(durability=durability, model=gateway, deps=bank, limits=limits, sinks=[events])
    return BankDesk(kernel.compile(AGENT), bank, events)
