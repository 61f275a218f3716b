"""Approve with edits: a kernel confirmation accepted with changed arguments (issue 33, item 4)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import (
    AgentCompilationError,
    DurabilityStore,
    ErrorCode,
    InvalidInputError,
    TurnConflictError,
)
from intention_kernel.contracts.codec import fingerprint
from intention_kernel.kernel import (
    Kernel,
    PolicyRequest,
    allow,
    deny,
)
from intention_kernel.kernel.approval import operation_digest
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

from .support import World, make_world, support_agent
from .writes import CHARGE, CHARGE_42, REFUND, Payments, accept

AMOUNT_ONLY = replace(CHARGE, editable=("amount",))
ANY_FIELD = replace(CHARGE, editable=True)


def _world(
    durability: DurabilityStore, charge: Any = AMOUNT_ONLY, **agent: Any
) -> tuple[World, Payments]:
    payments = Payments()
    world = make_world(
        durability,
        agent=support_agent([charge, REFUND], **agent),
        ports={"payments": payments},
    )
    world.say("charge 42", CHARGE_42)
    world.say(
        "refund 42", [{"capability": "payments.refund", "input": {"order_id": "42", "amount": 5}}]
    )
    return world, payments


def _edit(result: Any, option: str = "yes", **edits: Any) -> dict[str, Any]:
    return {**accept(result, option), "edits": edits}


async def _refused(world: World, turn: str, selection: dict[str, Any]) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as info:
        await world.run(turn, "", selection=selection, host_context={"actor": "ann"})
    return info.value


async def test_an_edited_approval_runs_the_approved_input_once_and_records_both(
    durability: DurabilityStore,
) -> None:
    world, payments = _world(durability)
    proposed = await world.run("turn-1", "charge 42")
    [item] = proposed.checkpoint.agenda
    asked = proposed.checkpoint.interaction.prompt
    done = await world.run(
        "turn-2", "", selection=_edit(proposed, amount=7), host_context={"actor": "ann"}
    )
    assert payments.calls == ["payments.charge:order:42"]
    assert [c["amount"] for c in payments.charges.values()] == [7]
    assert done.response.text == "Charged 7 EUR for order 42."
    assert done.checkpoint.agenda == [] and done.checkpoint.interaction is None

    approved: dict[str, JsonValue] = {"order_id": "42", "amount": 7}
    digest = operation_digest("payments.charge", "1.0.0", approved, {})
    [decision] = done.checkpoint.metadata["decisions"]
    assert isinstance(decision, dict)
    assert decision["decision"] == "accepted" and decision["actor"] == "ann"
    assert decision["proposed_input"] == {"order_id": "42", "amount": 5}
    assert decision["input"] == approved and decision["edited"] == ["amount"]
    assert decision["proposed_digest"] == item.data["digest"] and decision["digest"] == digest
    assert decision["proposed_question"] == asked and "amount: 5" in str(asked)
    assert "amount: 7" in str(decision["question"])  # re-rendered: what was approved

    # The audit event carries digests and field names, never the values.
    [event] = world.collector.of_type("confirmation.accepted")
    assert event.data["edited"] == ["amount"] and event.data["digest"] == digest
    assert event.data["proposed_digest"] == item.data["digest"]
    assert "question" not in event.data and "input" not in event.data
    [step] = [e for e in world.collector.for_turn("turn-2") if e.type == "step.completed"]
    assert step.data["approval_digest"] == digest

    # The ledger keeps the approved request; a replay of the answering turn runs nothing.
    receipt = await durability.get_receipt("t1", "payments.charge:order:42")
    assert receipt is not None and receipt.request_fingerprint == fingerprint(approved)
    calls = world.gateway.count()
    again = await world.run(
        "turn-2", "", selection=_edit(proposed, amount=7), host_context={"actor": "ann"}
    )
    assert again.replayed and again.response == done.response
    assert payments.calls == ["payments.charge:order:42"] and world.gateway.count() == calls
    # The same turn id with another edit is another request: refused, nothing runs.
    with pytest.raises(TurnConflictError) as reused:
        await world.run("turn-2", "", selection=_edit(proposed, amount=8))
    assert reused.value.code == ErrorCode.TURN_ID_REUSED
    assert payments.calls == ["payments.charge:order:42"]


async def test_an_edit_to_the_key_field_is_another_operation(durability: DurabilityStore) -> None:
    world, payments = _world(durability, ANY_FIELD)
    proposed = await world.run("turn-1", "charge 42")
    done = await world.run("turn-2", "", selection=_edit(proposed, order_id="43"))
    assert payments.calls == ["payments.charge:order:43"]  # the key follows the approved input
    assert done.response.text == "Charged 5 EUR for order 43."
    assert await durability.get_receipt("t1", "payments.charge:order:42") is None


async def test_an_edit_that_fails_validation_is_refused_and_the_confirmation_stays(
    durability: DurabilityStore,
) -> None:
    world, payments = _world(durability)
    proposed = await world.run("turn-1", "charge 42")
    refused = await _refused(world, "turn-2", _edit(proposed, amount="lots"))
    assert refused.code == ErrorCode.EDIT_INVALID
    assert refused.context["reason"] == "invalid" and refused.context["fields"] == ["amount"]
    problems = refused.context["problems"]
    assert isinstance(problems, list) and problems[0]["loc"] == ["amount"]
    assert "lots" not in str(refused.context)  # the rejected value is not echoed
    assert payments.calls == []
    stored = await durability.load_checkpoint("t1")
    assert stored is not None and stored.revision == proposed.checkpoint.revision
    assert stored.interaction == proposed.checkpoint.interaction  # still held
    done = await world.run("turn-3", "", selection=accept(proposed))
    assert payments.calls == ["payments.charge:order:42"]
    assert done.response.text == "Charged 5 EUR for order 42."


async def test_an_edit_of_a_locked_field_is_refused_and_nothing_runs(
    durability: DurabilityStore,
) -> None:
    world, payments = _world(durability)
    proposed = await world.run("turn-1", "charge 42")
    refused = await _refused(world, "turn-2", _edit(proposed, order_id="43", amount=6))
    assert refused.code == ErrorCode.EDIT_NOT_ALLOWED
    assert refused.context["reason"] == "locked" and refused.context["fields"] == ["order_id"]
    assert refused.context["editable"] == ["amount"]
    unknown = await _refused(world, "turn-2", _edit(proposed, tip=1))
    assert unknown.code == ErrorCode.EDIT_INVALID and unknown.context["fields"] == ["tip"]
    declining = await _refused(world, "turn-2", _edit(proposed, "no", amount=6))
    assert declining.code == ErrorCode.EDIT_NOT_ALLOWED
    assert declining.context["reason"] == "not_accepting"
    shaped = await _refused(world, "turn-2", {**accept(proposed), "edits": [1]})
    assert shaped.code == ErrorCode.EDIT_INVALID
    assert payments.calls == []
    stored = await durability.load_checkpoint("t1")
    assert stored is not None and stored.interaction == proposed.checkpoint.interaction


async def test_by_default_a_confirmation_cannot_be_edited(durability: DurabilityStore) -> None:
    world, payments = _world(durability, CHARGE)
    proposed = await world.run("turn-1", "charge 42")
    refused = await _refused(world, "turn-2", _edit(proposed, amount=6))
    assert refused.code == ErrorCode.EDIT_NOT_ALLOWED
    assert refused.context["reason"] == "not_editable" and refused.context["fields"] == ["amount"]
    # A capability-owned confirmation is the capability's question: never edited by the kernel.
    owned = await world.run("turn-3", "refund 42", thread_id="t2")
    with pytest.raises(InvalidInputError) as info:
        await world.run("turn-4", "", thread_id="t2", selection=_edit(owned, amount=1))
    assert info.value.code == ErrorCode.EDIT_NOT_ALLOWED
    assert payments.calls == []


async def test_an_edit_that_changes_nothing_is_a_plain_accept(
    durability: DurabilityStore,
) -> None:
    world, payments = _world(durability)
    proposed = await world.run("turn-1", "charge 42")
    done = await world.run("turn-2", "", selection=_edit(proposed, amount=5))
    [decision] = done.checkpoint.metadata["decisions"]
    assert isinstance(decision, dict) and "edited" not in decision
    assert payments.calls == ["payments.charge:order:42"]


async def test_policies_judge_the_edited_operation(durability: DurabilityStore) -> None:
    def at_most_100(request: PolicyRequest) -> Any:
        amount = request.input.get("amount")
        return (
            deny("That is above the limit.")
            if isinstance(amount, int) and amount > 100
            else allow()
        )

    world, payments = _world(durability, policies=[at_most_100])
    proposed = await world.run("turn-1", "charge 42")
    refused = await _refused(world, "turn-2", _edit(proposed, amount=500))
    assert refused.code == ErrorCode.EDIT_NOT_ALLOWED and refused.context["reason"] == "refused"
    assert refused.context["refusal"] == "That is above the limit."
    assert payments.calls == []


def test_editable_names_fields_of_the_input_at_compile() -> None:
    kernel = Kernel(durability=MemoryDurability(), model=ScriptedModelGateway())
    with pytest.raises(AgentCompilationError) as info:
        kernel.compile(support_agent([replace(CHARGE, editable=("amount", "tip"))]))
    problems = info.value.context["problems"]
    assert isinstance(problems, list)
    [problem] = [p for p in problems if isinstance(p, dict)]
    assert problem["code"] == "unknown_consent_field" and "'tip'" in str(problem["message"])
    # Editability is presentation for operators, not contract: the fingerprint is unchanged.
    plain = kernel.compile(support_agent([CHARGE]))
    assert kernel.compile(support_agent([AMOUNT_ONLY])).fingerprint == plain.fingerprint
