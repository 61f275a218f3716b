"""Approve with edits over HTTP: the same selection JSON, on a real server on loopback.

A charge of 5 EUR asks for consent; the capability lets the amount be edited. An edit that
fails validation and one of the locked order id are 422 problems naming the fields, nothing
runs and the confirmation stays; an edit of the amount runs the charge once with the approved
amount, the principal recorded as the actor, and the history shows what was edited.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from intention_kernel.contracts import DurabilityStore
from intention_kernel.http import BearerTokens, create_app

from ..kernel.support import make_world, support_agent
from ..kernel.writes import CHARGE, CHARGE_42, Payments
from .support import FAST_WORKERS, TOKENS, Live, bearer, is_problem, serve


def _app(store: DurabilityStore, **options: Any) -> tuple[Any, Payments]:
    payments = Payments()
    world = make_world(
        store,
        agent=support_agent([replace(CHARGE, editable=("amount",))]),
        ports={"payments": payments},
    )
    world.say("charge 42", CHARGE_42)
    app = create_app(
        world.agent,
        authenticate=BearerTokens.from_secrets(TOKENS),
        worker_settings=FAST_WORKERS,
        **options,
    )
    return app, payments


def _press(interaction: dict[str, Any], **edits: Any) -> dict[str, Any]:
    selection = {"interaction_id": interaction["id"], "option": "yes", "edits": edits}
    return {"text": "", "selection": selection}


async def _held(live: Live) -> dict[str, Any]:
    answer = await live.client.get("/v1/threads/t-1", headers=bearer())
    assert answer.status_code == 200, answer.text
    interaction: dict[str, Any] = answer.json()["interaction"]
    return interaction


async def test_an_edited_approval_over_http(store: DurabilityStore) -> None:
    app, payments = _app(store)
    async with serve(app) as live:
        asked = await live.post("t-1", "k-ask", {"text": "charge 42"})
        assert asked.status_code == 200, asked.text
        interaction = asked.json()["interaction"]
        assert "amount: 5" in interaction["prompt"]

        bad = await live.post("t-1", "k-bad", _press(interaction, amount="lots"))
        problem = is_problem(bad, 422, "EDIT_INVALID")
        assert problem["detail"].startswith("the edited input is not valid: amount;")
        assert "lots" not in bad.text

        locked = await live.post("t-1", "k-locked", _press(interaction, order_id="43"))
        problem = is_problem(locked, 422, "EDIT_NOT_ALLOWED")
        assert "not allow editing these fields: order_id;" in problem["detail"]
        assert payments.calls == []
        assert (await _held(live))["id"] == interaction["id"]  # still waiting for consent

        done = await live.post("t-1", "k-yes", _press(interaction, amount=7))
        assert done.status_code == 200, done.text
        assert done.json()["response"]["text"] == "Charged 7 EUR for order 42."
        again = await live.post("t-1", "k-yes", _press(interaction, amount=7))
        assert again.status_code == 200 and again.json()["replayed"] is True
        assert payments.calls == ["payments.charge:order:42"]
        assert [c["amount"] for c in payments.charges.values()] == [7]

        history = await live.client.get("/v1/threads/t-1/turns", headers=bearer())
        pressed = history.json()["turns"][-1]
        answer = pressed["answer"]
        assert answer["actor"] == "alice" and answer["edited"] == ["amount"]
        assert answer["proposed_question"] == interaction["prompt"]
        assert "amount: 7" in answer["question"]
        assert pressed["input"].startswith("accepted with edits to amount: Please confirm:")
        stored = await store.load_checkpoint("t-1")
        assert stored is not None
        decisions = stored.metadata["decisions"]
        assert isinstance(decisions, list)
        [decision] = decisions
        assert isinstance(decision, dict)
        assert decision["proposed_input"] == {"order_id": "42", "amount": 5}
        assert decision["input"] == {"order_id": "42", "amount": 7}


async def test_a_turn_run_in_the_request_names_the_refused_fields(
    sqlite_store: DurabilityStore,
) -> None:
    app, payments = _app(sqlite_store, busy="wait")  # runs the turn here, not in a worker
    async with serve(app) as live:
        asked = await live.post("t-1", "k-ask", {"text": "charge 42"})
        interaction = asked.json()["interaction"]
        bad = await live.post("t-1", "k-bad", _press(interaction, amount="lots"))
        problem = is_problem(bad, 422, "EDIT_INVALID")
        assert problem["fields"] == ["amount"] and problem["reason"] == "invalid"
        assert problem["problems"][0]["loc"] == ["amount"] and "lots" not in bad.text
        locked = await live.post("t-1", "k-locked", _press(interaction, order_id="43"))
        problem = is_problem(locked, 422, "EDIT_NOT_ALLOWED")
        assert problem["fields"] == ["order_id"] and problem["editable"] == ["amount"]
        done = await live.post("t-1", "k-yes", _press(interaction, amount=7))
        assert done.json()["response"]["text"] == "Charged 7 EUR for order 42."
        assert payments.calls == ["payments.charge:order:42"]
