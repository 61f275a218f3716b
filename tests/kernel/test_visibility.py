"""What a model may see: fact types shown in full (redacted paths withheld), as present only,
or not at all, and withheld values never in any model request. ``Completed.artifacts`` reach
the response."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, JsonValue

from intention_kernel.contracts import AgentCompilationError, DurabilityStore
from intention_kernel.kernel import (
    CapabilityContext,
    Completed,
    Kernel,
    ModelVisibility,
    ProducedFact,
    StepStatus,
    define_capability,
    define_fact,
)
from intention_kernel.kernel._visibility import REDACTED
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

from .support import FaqAnswer, TrackQuery, World, make_world, support_agent

CARD = "4111 1111 1111 1111"
PIN = 987654
EMAIL = "ann.secret@example.com"


class Wallet(BaseModel):
    holder: str


class Saved(BaseModel):
    card: str
    holder: str


async def _save(context: CapabilityContext, query: Wallet) -> Completed:
    card: JsonValue = {"number": CARD, "pin": PIN, "holder": query.holder}
    return Completed(
        output=Saved(card=CARD, holder=query.holder),
        facts=(
            ProducedFact("card@1", card),
            ProducedFact("customer@1", {"name": query.holder, "contact": {"email": EMAIL}}),
            ProducedFact("consent@1", {"given": True, "token": "consent-token-77"}),
        ),
        text=f"Saved card {CARD} for {query.holder} (pin {PIN}, mail {EMAIL}).",
        artifacts={"card_widget": {"last4": CARD[-4:], "brand": "visa"}},
    )


async def _pay(context: CapabilityContext, query: TrackQuery) -> Completed:
    card = context.fact("card@1")
    assert card is not None and isinstance(card.value, dict)
    assert card.value["number"] == CARD  # capabilities see the full value
    return Completed(output=FaqAnswer(answer="ok"), text=f"Paid with card ending {CARD[-4:]}.")


WALLET = [
    define_capability(
        id="wallet.save",
        version="1.0.0",
        description="Save a card.",
        input=Wallet,
        output=Saved,
        provides=["card@1", "customer@1", "consent@1"],
        execute=_save,
    ),
    define_capability(
        id="wallet.pay",
        version="1.0.0",
        description="Pay with the saved card.",
        input=TrackQuery,
        output=FaqAnswer,
        requires=["card@1"],
        execute=_pay,
    ),
]
FACTS = [
    define_fact("card@1", visibility="hidden"),
    define_fact("consent@1", visibility=ModelVisibility.PRESENCE),
    define_fact("customer@1", redact=["contact.email"]),
]


def wallet_world(durability: DurabilityStore) -> World:
    world = make_world(durability, agent=support_agent(WALLET, facts=FACTS))
    world.say("save my card", [{"capability": "wallet.save", "input": {"holder": "Ann"}}])
    world.say("pay with it", [{"capability": "wallet.pay", "input": {}}])
    return world


async def test_withheld_values_never_reach_any_model_request(durability: DurabilityStore) -> None:
    world = wallet_world(durability)
    saved = await world.run("turn-1", "save my card")
    assert saved.response.steps[0].status == StepStatus.COMPLETED
    assert CARD not in saved.response.text  # the model wrote the answer without ever seeing it
    await world.run("turn-2", "pay with it")
    await world.run("turn-3", "where is my order?")
    assert world.gateway.count("interpret") == 3 and world.gateway.count("compose") >= 2
    for request in world.gateway.calls:
        sent = request.model_dump_json()
        for secret in (CARD, str(PIN), EMAIL, "consent-token-77"):
            assert secret not in sent, (request.task, secret)
    last: Any = world.gateway.calls[-1].input
    by_type = {f["type"]: f for f in last["context"]["facts"]}
    assert "card@1" not in by_type  # hidden: not shown at all
    assert by_type["consent@1"] == {
        "id": "consent@1",
        "type": "consent@1",
        "revision": 1,
        "present": True,
    }
    assert by_type["customer@1"]["value"] == {"name": "Ann", "contact": {"email": REDACTED}}
    # The capability's output and canonical text reached compose scrubbed, not dropped.
    compose: Any = next(c for c in world.gateway.calls if c.task == "compose").input
    [outcome] = compose["outcomes"]
    assert outcome["output"] == {"card": REDACTED, "holder": "Ann"}
    assert f"Saved card {REDACTED} for Ann" in outcome["text"]


async def test_without_declarations_every_fact_is_shown(durability: DurabilityStore) -> None:
    world = make_world(durability, agent=support_agent(WALLET))
    world.say("save my card", [{"capability": "wallet.save", "input": {"holder": "Ann"}}])
    await world.run("turn-1", "save my card")
    await world.run("turn-2", "hello")
    assert CARD in world.gateway.calls[-1].model_dump_json()


def test_fact_declarations_are_checked_at_compile() -> None:
    agent = support_agent(
        WALLET,
        facts=[
            define_fact("card@1", visibility="secret"),  # type: ignore[arg-type]
            define_fact("card@1"),
            define_fact("nobody@1"),
            define_fact("Card"),
            define_fact("customer@1", redact=["contact..email"]),
            "card@1",
        ],
    )
    kernel = Kernel(durability=MemoryDurability(), model=ScriptedModelGateway())
    with pytest.raises(AgentCompilationError) as info:
        kernel.compile(agent)
    codes = {(p["code"], p["where"]) for p in info.value.context["problems"]}
    assert codes == {
        ("invalid_visibility", "fact 'card@1'"),
        ("duplicate_fact_type", "fact 'card@1'"),
        ("unknown_fact_type", "fact 'nobody@1'"),
        ("invalid_fact_ref", "fact 'Card'"),
        ("invalid_redaction", "fact 'customer@1'"),
        ("invalid_fact_type", "facts[5]"),
    }


def test_visibility_is_not_part_of_the_fingerprint() -> None:
    kernel = Kernel(durability=MemoryDurability(), model=ScriptedModelGateway())
    shown = kernel.compile(support_agent(WALLET)).fingerprint
    assert kernel.compile(support_agent(WALLET, facts=FACTS)).fingerprint == shown


async def test_artifacts_reach_the_response_and_its_replay(durability: DurabilityStore) -> None:
    world = wallet_world(durability)
    first = await world.run("turn-1", "save my card")
    [step] = first.response.steps
    assert step.artifacts == {"card_widget": {"last4": "1111", "brand": "visa"}}
    again = await world.run("turn-1", "save my card")
    assert again.replayed and again.response.steps[0].artifacts == step.artifacts
    for request in world.gateway.calls:
        assert "card_widget" not in request.model_dump_json()  # for the host, not the model


async def test_unstorable_artifacts_fail_the_step(durability: DurabilityStore) -> None:
    async def odd(context: CapabilityContext, query: TrackQuery) -> Completed:
        return Completed(output={"answer": "x"}, artifacts={"when": {1, 2}})  # type: ignore[dict-item]

    cap = define_capability(
        id="odd.thing",
        version="1.0.0",
        description="Return an odd artifact.",
        input=TrackQuery,
        output=FaqAnswer,
        execute=odd,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("odd", [{"capability": "odd.thing", "input": {}}])
    result = await world.run("turn-1", "odd")
    [step] = result.response.steps
    assert step.status == StepStatus.FAILED
    assert step.reason == "the capability's artifacts cannot be stored"
