"""The consent question shows what it authorizes: every field, whatever their lengths.

A transfer with a long memo: the amount stays in the question, the user accepts what they saw,
and that question is kept with the approval. A capability names its material fields and a
summary (checked at compile); an operation too large to show in full is never asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from intention_kernel.contracts import (
    AgendaItem,
    AgendaStatus,
    AgentCompilationError,
    DurabilityStore,
    EffectAuthority,
    KernelCheckpoint,
)
from intention_kernel.kernel import (
    CapabilityContext,
    Completed,
    Kernel,
    NeedsConfirmation,
    define_capability,
)
from intention_kernel.kernel._pipeline.reduce import reduce_outcomes
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

from .support import FaqAnswer, World, make_world, support_agent
from .writes import accept

MEMO = "Invoice 2024-117 " + "for consulting services rendered " * 12 + "in March"


class Transfer(BaseModel):
    payee: str
    memo: str
    amount_eur: int


class Line(BaseModel):
    sku: str
    quantity: int


class Order(BaseModel):
    lines: list[Line]


@dataclass
class Bank:
    transfers: list[dict[str, Any]] = field(default_factory=list)

    async def send(self, authority: EffectAuthority, transfer: Transfer) -> dict[str, Any]:
        self.transfers.append({"key": authority.idempotency_key, **transfer.model_dump()})
        return {"sent": transfer.amount_eur}


async def _transfer(context: CapabilityContext, transfer: Transfer) -> Completed:
    bank: Bank = context.ports["bank"]
    await context.run_effect(
        f"transfer:{transfer.payee}", lambda authority: bank.send(authority, transfer)
    )
    assert context.approval is not None
    return Completed(output=FaqAnswer(answer="sent"), text=f"Sent {transfer.amount_eur} EUR.")


def transfer_capability(**consent: Any) -> Any:
    return define_capability(
        id="payments.transfer",
        version="1.0.0",
        description="Send a bank transfer.",
        input=Transfer,
        output=FaqAnswer,
        effect="write",
        confirmation="required",
        execute=_transfer,
        **consent,
    )


def bank_world(durability: DurabilityStore, *caps: Any) -> tuple[World, Bank]:
    bank = Bank()
    world = make_world(durability, agent=support_agent(list(caps)), ports={"bank": bank})
    payment = {"payee": "ACME Ltd", "memo": MEMO, "amount_eur": 9800}
    world.say("pay acme", [{"capability": "payments.transfer", "input": payment}])
    return world, bank


async def test_a_long_memo_never_hides_the_amount_and_the_question_is_kept_with_the_approval(
    durability: DurabilityStore,
) -> None:
    world, bank = bank_world(durability, transfer_capability())
    asked = await world.run("turn-1", "pay acme")
    interaction = asked.checkpoint.interaction
    assert interaction is not None and interaction.kind == "confirmation"
    question = interaction.prompt
    assert question.startswith("Please confirm: Send a bank transfer (payee: ACME Ltd, memo: ")
    assert question.endswith(", amount_eur: 9800).")
    assert "memo: Invoice 2024-117 for" in question and "rendered in March, amount_eur" in question
    assert question.count("…") == 1 and len(question) < len(MEMO)  # the memo, cut in the middle
    assert question in asked.response.text
    [item] = asked.checkpoint.agenda
    assert item.input == {"payee": "ACME Ltd", "memo": MEMO, "amount_eur": 9800}

    done = await world.run(
        "turn-2", "", selection=accept(asked), host_context={"actor": "ann@example.com"}
    )
    assert [t["amount_eur"] for t in bank.transfers] == [9800]
    [decision] = done.checkpoint.metadata["decisions"]
    assert isinstance(decision, dict)
    assert decision["decision"] == "accepted" and decision["actor"] == "ann@example.com"
    assert decision["question"] == question, "an operator sees what the user saw"
    # The audit event carries the digest, not the operation's values.
    [event] = [e for e in world.collector.events if e.type == "confirmation.accepted"]
    assert "question" not in event.data and event.data["digest"] == decision["digest"]

    stored = await durability.list_turns("t1")
    assert stored[-1].checkpoint.metadata["decisions"] == [decision]


async def test_material_fields_come_first_and_a_summary_heads_the_full_list(
    durability: DurabilityStore,
) -> None:
    cap = transfer_capability(
        consent_fields=("amount_eur", "payee"), consent_summary="Pay {amount_eur} EUR to {payee}"
    )
    world, bank = bank_world(durability, cap)
    asked = await world.run("turn-1", "pay acme")
    assert asked.checkpoint.interaction is not None
    question = asked.checkpoint.interaction.prompt
    assert question.startswith(
        "Please confirm: Pay 9800 EUR to ACME Ltd (amount_eur: 9800, payee: ACME Ltd, memo: "
        "Invoice 2024-117 "
    )
    assert question.endswith("services rendered in March).")
    done = await world.run("turn-2", "", selection=accept(asked))
    assert [t["amount_eur"] for t in bank.transfers] == [9800]
    [decision] = done.checkpoint.metadata["decisions"]
    assert isinstance(decision, dict) and decision["question"] == question


async def test_an_operation_too_large_to_show_is_never_asked_and_nothing_runs(
    durability: DurabilityStore,
) -> None:
    ran: list[Order] = []

    async def place(context: CapabilityContext, order: Order) -> Completed:
        ran.append(order)
        return Completed(output=FaqAnswer(answer="placed"))

    cap = define_capability(
        id="orders.place",
        version="1.0.0",
        description="Place a wholesale order.",
        input=Order,
        output=FaqAnswer,
        effect="write",
        confirmation="required",
        execute=place,
    )
    world = make_world(durability, agent=support_agent([cap]))
    lines = [{"sku": f"SKU-{n:05d}-{'x' * 20}", "quantity": n} for n in range(400)]
    world.say("order all", [{"capability": "orders.place", "input": {"lines": lines}}])
    result = await world.run("turn-1", "order all")
    assert ran == []
    assert result.checkpoint.interaction is None and result.checkpoint.agenda == []
    assert "more details than one question can show" in result.response.text


async def test_a_capability_owned_question_lists_every_field_after_its_own_words(
    durability: DurabilityStore,
) -> None:
    async def ask(context: CapabilityContext, transfer: Transfer) -> NeedsConfirmation | Completed:
        if context.answer is None:
            return NeedsConfirmation("Shall I send this transfer?")
        return Completed(output=FaqAnswer(answer="sent"))

    cap = define_capability(
        id="payments.transfer",
        version="1.0.0",
        description="Send a bank transfer.",
        input=Transfer,
        output=FaqAnswer,
        effect="write",
        confirmation="capability",
        execute=ask,
        consent_fields=["amount_eur"],
    )
    world, _ = bank_world(durability, cap)
    asked = await world.run("turn-1", "pay acme")
    assert asked.checkpoint.interaction is not None
    question = asked.checkpoint.interaction.prompt
    assert question.startswith("Shall I send this transfer? (amount_eur: 9800, payee: ACME Ltd, ")
    assert question.endswith("rendered in March)")
    done = await world.run("turn-2", "", selection=accept(asked), host_context={"actor": "bo"})
    [decision] = done.checkpoint.metadata["decisions"]
    assert isinstance(decision, dict)
    assert decision["decision"] == "answered" and decision["question"] == question


@pytest.mark.parametrize(
    ("consent", "named"),
    [
        ({"consent_fields": ["amount"]}, "'amount'"),
        ({"consent_summary": "Pay {amount} EUR to {payee}"}, "'amount'"),
        ({"consent_fields": ["payee", "iban"], "consent_summary": "Pay {amount_eur}"}, "'iban'"),
    ],
)
def test_consent_fields_and_summary_name_input_fields_at_compile(
    consent: dict[str, Any], named: str
) -> None:
    kernel = Kernel(durability=MemoryDurability(), model=ScriptedModelGateway())
    with pytest.raises(AgentCompilationError) as info:
        kernel.compile(support_agent([transfer_capability(**consent)]))
    problems = info.value.context["problems"]
    assert isinstance(problems, list)
    [problem] = [p for p in problems if isinstance(p, dict) and "consent" in str(p["code"])]
    assert problem["code"] == "unknown_consent_field"
    assert problem["where"] == "capability 'payments.transfer'"
    assert named in str(problem["message"])


@pytest.mark.parametrize(
    "summary", ["Pay {amount_eur:.2f}", "Pay {amount_eur!r}", "Pay {} EUR", "Pay {amount_eur", " "]
)
def test_a_summary_template_takes_plain_field_placeholders_only(summary: str) -> None:
    kernel = Kernel(durability=MemoryDurability(), model=ScriptedModelGateway())
    with pytest.raises(AgentCompilationError) as info:
        kernel.compile(support_agent([transfer_capability(consent_summary=summary)]))
    problems = info.value.context["problems"]
    assert isinstance(problems, list)
    assert [p["code"] for p in problems if isinstance(p, dict)] == ["invalid_consent_summary"]


def test_the_consent_presentation_is_not_part_of_the_fingerprint() -> None:
    kernel = Kernel(durability=MemoryDurability(), model=ScriptedModelGateway())
    plain = kernel.compile(support_agent([transfer_capability()]))
    shaped = kernel.compile(
        support_agent(
            [transfer_capability(consent_fields=["amount_eur"], consent_summary="Pay {payee}")]
        )
    )
    assert plain.fingerprint == shaped.fingerprint


def test_a_pending_item_too_large_to_show_is_not_asked_again() -> None:
    """An agenda item stored before operations too large to show were refused: reopening it
    as the active interaction would ask for consent to what the user cannot see."""
    lines = [{"sku": f"SKU-{n:05d}-{'x' * 20}", "quantity": n} for n in range(400)]
    big = AgendaItem(
        id="old:step-1",
        capability_id="orders.place",
        capability_version="1.0.0",
        input={"lines": lines},
        status=AgendaStatus.AWAITING_CONFIRMATION,
        created_turn_id="old",
        data={"digest": "d", "relied_on": {}},
    )
    small = big.model_copy(update={"id": "old:step-2", "input": {"lines": lines[:2]}})
    checkpoint = KernelCheckpoint(revision=1, agent_fingerprint="x", agenda=[big])
    alone = reduce_outcomes(checkpoint, [], [], "turn-2", 10, thread_id="t")
    assert alone.interaction is None and [a.id for a in alone.agenda] == ["old:step-1"]
    both = checkpoint.model_copy(update={"agenda": [big, small]})
    asked = reduce_outcomes(both, [], [], "turn-2", 10, thread_id="t").interaction
    assert asked is not None and asked.agenda_item_id == "old:step-2"
    assert asked.prompt.startswith("Please confirm: orders.place (lines[0].sku: SKU-00000-")
