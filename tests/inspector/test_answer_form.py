"""The answer form without a browser: typed text read per the field's JSON Schema type, the
kernel's description of a pending confirmation, and the answer routes over the ASGI app
(no agent, ``authorize`` asked with ``answer``, a capability-owned confirmation, a stale one).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from typing import Any, Literal

import httpx
import pytest
from pydantic import BaseModel, JsonValue

from intention_kernel.contracts import ErrorCode, InvalidInputError
from intention_kernel.http import BearerTokens, Principal
from intention_kernel.http.inspector import create_inspector
from intention_kernel.http.inspector._answer_form import field_inputs, typed_edits
from intention_kernel.kernel import (
    CapabilityContext,
    Completed,
    PendingConfirmation,
    define_capability,
    pending_confirmation,
)
from intention_kernel.testing import MemoryDurability

from ..kernel.support import FaqAnswer, World, make_world, support_agent
from ..kernel.writes import CHARGE, CHARGE_42, REFUND, Payments, accept

SECRETS = {"alice": "alice-token-0001", "bob": "bob-token-000002", "carol": "carol-token-0003"}
ROLES = {"alice": ["operator"], "bob": ["viewer"], "carol": ["operator"]}


class Shipment(BaseModel):
    order_id: str
    count: int
    ratio: float
    urgent: bool
    color: Literal["red", "blue"]
    note: str
    tags: list[str]
    limit: int | None


async def _ship(context: CapabilityContext, shipment: Shipment) -> Completed:
    return Completed(output=FaqAnswer(answer="sent"), text=f"Shipped {shipment.count}.")


SHIP = define_capability(
    id="orders.ship",
    version="1.0.0",
    description="Ship an order.",
    input=Shipment,
    output=FaqAnswer,
    effect="write",
    confirmation="required",
    execute=_ship,
    editable=("count", "ratio", "urgent", "color", "note", "tags", "limit"),
)
PROPOSED: dict[str, JsonValue] = {
    "order_id": "42",
    "count": 3,
    "ratio": 0.5,
    "urgent": False,
    "color": "red",
    "note": "leave at the door",
    "tags": ["fragile"],
    "limit": None,
}


async def _shipment() -> PendingConfirmation:
    world = make_world(MemoryDurability(), agent=support_agent([SHIP]))
    world.say("ship 42", [{"capability": "orders.ship", "input": PROPOSED}])
    result = await world.run("ask", "ship 42")
    pending = pending_confirmation(world.agent, result.checkpoint)
    assert pending is not None
    return pending


async def test_each_field_is_shown_and_read_back_per_its_schema_type() -> None:
    pending = await _shipment()
    assert pending.kernel_owned and pending.runnable and pending.accepting == ("yes",)
    assert pending.editable == SHIP.editable and pending.proposed == PROPOSED
    shown = {
        f.name: (f.kind, f.nullable, f.proposed_text, f.editable) for f in field_inputs(pending)
    }
    assert shown == {
        "order_id": ("string", False, "42", False),
        "count": ("integer", False, "3", True),
        "ratio": ("number", False, "0.5", True),
        "urgent": ("boolean", False, "false", True),
        "color": ("choice", False, "red", True),
        "note": ("string", False, "leave at the door", True),
        "tags": ("json", False, '["fragile"]', True),
        "limit": ("integer", True, "", True),
    }
    as_shown = {f"edit.{f.name}": f.proposed_text for f in field_inputs(pending)}
    assert typed_edits(pending, as_shown) == {}  # nothing changed: a plain approval
    typed = {
        **as_shown,
        "edit.count": " 12 ",
        "edit.ratio": "1e3",
        "edit.urgent": "true",
        "edit.color": "blue",
        "edit.note": "  ring twice ",
        "edit.tags": '["fragile", "heavy"]',
        "edit.limit": "7",
    }
    edits = typed_edits(pending, typed)
    assert edits == {
        "count": 12,
        "ratio": 1000.0,
        "urgent": True,
        "color": "blue",
        "note": "  ring twice ",  # text is taken exactly as typed
        "tags": ["fragile", "heavy"],
        "limit": 7,
    }
    pending.check_edits(edits)
    assert typed_edits(pending, {"edit.ratio": "2", "edit.limit": ""}) == {"ratio": 2}
    assert typed_edits(pending, {"edit.urgent": "false"}) == {}  # False is not 0


@pytest.mark.parametrize(
    ("field", "text", "said"),
    [
        ("count", "3.0", "enter a whole number"),
        ("count", "", "enter a whole number"),
        ("ratio", "inf", "enter a number"),
        ("ratio", "nan", "enter a number"),
        ("ratio", "1e999", "enter a number"),
        ("urgent", "yes", "enter true or false"),
        ("color", "green", "enter one of the choices"),
        ("tags", "[fragile", "enter JSON"),
        ("tags", "NaN", "enter JSON"),
        ("limit", "x", "enter a whole number, or empty for none"),
    ],
)
async def test_text_that_does_not_read_as_its_type_is_an_invalid_edit(
    field: str, text: str, said: str
) -> None:
    pending = await _shipment()
    with pytest.raises(InvalidInputError) as info:
        typed_edits(pending, {f"edit.{field}": text, "edit.count": "nope"})
    refused = info.value
    assert refused.code == ErrorCode.EDIT_INVALID and refused.context["reason"] == "invalid"
    assert refused.context["fields"] == sorted({field, "count"})
    problems = refused.context["problems"]
    assert isinstance(problems, list)
    assert {"loc": [field], "msg": said, "type": "form"} in problems


async def test_check_edits_refuses_as_the_kernel_does() -> None:
    pending = await _shipment()
    cases: list[tuple[dict[str, JsonValue], ErrorCode, str, list[str]]] = [
        ({"order_id": "43"}, ErrorCode.EDIT_NOT_ALLOWED, "locked", ["order_id"]),
        ({"tip": 1}, ErrorCode.EDIT_INVALID, "unknown_field", ["tip"]),
        ({"count": "many"}, ErrorCode.EDIT_INVALID, "invalid", ["count"]),
    ]
    for edits, code, reason, fields in cases:
        with pytest.raises(InvalidInputError) as info:
            pending.check_edits(edits)
        assert info.value.code == code and info.value.context["reason"] == reason
        assert info.value.context["fields"] == fields
    # A locked field read from a crafted form is passed on (and refused), never dropped.
    assert typed_edits(pending, {"edit.order_id": "43"}) == {"order_id": "43"}
    assert typed_edits(pending, {"edit.tip": "1"}) == {"tip": "1"}


async def test_a_capability_owned_confirmation_takes_no_edits() -> None:
    world = make_world(MemoryDurability(), agent=support_agent([CHARGE, REFUND]))
    world.say(
        "refund 42", [{"capability": "payments.refund", "input": {"order_id": "42", "amount": 5}}]
    )
    result = await world.run("ask", "refund 42")
    pending = pending_confirmation(world.agent, result.checkpoint)
    assert pending is not None and not pending.kernel_owned and pending.editable == ()
    assert pending.options == ("yes", "no") and pending.accepting == ("yes",)
    with pytest.raises(InvalidInputError) as info:
        pending.check_edits({"amount": 1})
    assert info.value.code == ErrorCode.EDIT_NOT_ALLOWED
    assert info.value.context["reason"] == "not_editable"
    plain = await world.run("faq", "where is order 42?", thread_id="other")
    assert pending_confirmation(world.agent, plain.checkpoint) is None


# ---------------------------------------------------------------- the routes, in process


def authorize(principal: Principal, thread_id: str, action: str) -> bool:
    return not (principal.id == "carol" and action == "answer")


class Desk:
    def __init__(self) -> None:
        self.payments = Payments()
        self.world: World = make_world(
            MemoryDurability(),
            agent=support_agent([replace(CHARGE, editable=("amount",)), REFUND]),
            ports={"payments": self.payments},
        )
        self.world.say("charge 42", CHARGE_42)
        self.world.say(
            "refund 42",
            [{"capability": "payments.refund", "input": {"order_id": "42", "amount": 5}}],
        )


@pytest.fixture
async def desk() -> Desk:
    return Desk()


async def _client(app: Any, who: str) -> tuple[httpx.AsyncClient, str]:
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://inspector")
    page = await client.get("/login")
    answer = await client.post(
        "/login", data={"csrf": _csrf(page.text), "next": "/threads", "token": SECRETS[who]}
    )
    assert answer.status_code == 303, answer.text
    return client, _csrf((await client.get("/threads")).text)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html[:2000]
    return found.group(1)


@pytest.fixture
async def alice(desk: Desk) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    app = create_inspector(
        desk.world.durability,
        authenticate=BearerTokens.from_secrets(SECRETS, ROLES),
        agent=desk.world.agent,
        authorize=authorize,
    )
    client, csrf = await _client(app, "alice")
    async with aclosing(client):
        yield client, csrf


def _hidden(page: str) -> dict[str, str]:
    start = page.index('action="/answer"')
    return dict(re.findall(r'name="([^"]+)" value="([^"]*)"', page[start:]))


async def test_without_the_agent_the_question_is_shown_and_not_answered(desk: Desk) -> None:
    asked = await desk.world.run("ask", "charge 42")
    app = create_inspector(
        desk.world.durability, authenticate=BearerTokens.from_secrets(SECRETS, ROLES)
    )
    client, csrf = await _client(app, "alice")
    async with aclosing(client):
        page = await client.get("/thread", params={"id": "t1"})
        assert "Answering here needs the agent" in page.text and "answer-form" not in page.text
        chosen = {"csrf": csrf, "thread": "t1", "option": "yes", **_interaction(asked)}
        refused = await client.post("/answer/confirm", data=chosen)
        assert refused.status_code == 501 and "NO_AGENT" in refused.text


def _interaction(result: Any) -> dict[str, str]:
    return {"interaction": str(accept(result)["interaction_id"])}


async def test_authorize_is_asked_before_an_answer(desk: Desk) -> None:
    asked = await desk.world.run("ask", "charge 42")
    app = create_inspector(
        desk.world.durability,
        authenticate=BearerTokens.from_secrets(SECRETS, ROLES),
        agent=desk.world.agent,
        authorize=authorize,
    )
    client, csrf = await _client(app, "carol")
    async with aclosing(client):
        page = await client.get("/thread", params={"id": "t1"})
        assert "carol may not answer on this thread." in page.text
        assert "answer-form" not in page.text
        chosen = {"csrf": csrf, "thread": "t1", "option": "yes", **_interaction(asked)}
        for path in ("/answer/confirm", "/answer"):
            refused = await client.post(path, data=chosen)
            assert refused.status_code == 403 and "carol may not answer" in refused.text
    assert desk.payments.calls == []


async def test_a_capability_owned_confirmation_is_answered_as_asked(
    desk: Desk, alice: tuple[httpx.AsyncClient, str]
) -> None:
    client, csrf = alice
    asked = await desk.world.run("ask", "refund 42")
    page = await client.get("/thread", params={"id": "t1"})
    assert "The capability asks this itself" in page.text and 'name="edit.' not in page.text
    assert "yes: consent, the capability goes on" in page.text
    chosen = {"csrf": csrf, "thread": "t1", "option": "yes", **_interaction(asked)}
    crafted = await client.post("/answer/confirm", data={**chosen, "edit.amount": "1"})
    assert crafted.status_code == 422 and "EDIT_NOT_ALLOWED" in crafted.text
    review = await client.post("/answer/confirm", data=chosen)
    assert review.status_code == 200 and "yes (consent)" in review.text
    done = await client.post("/answer", data=_hidden(review.text))
    assert done.status_code == 303
    assert desk.payments.calls == ["payments.refund:refund:42"]
    shown = await client.get(done.headers["location"])
    assert "Refunded 5 EUR for order 42." in shown.text and "by alice" in shown.text


async def test_a_stale_review_and_an_unknown_answer_run_nothing(
    desk: Desk, alice: tuple[httpx.AsyncClient, str]
) -> None:
    client, csrf = alice
    asked = await desk.world.run("ask", "charge 42")
    chosen = {"csrf": csrf, "thread": "t1", **_interaction(asked)}
    unknown = await client.post("/answer/confirm", data={**chosen, "option": "maybe"})
    assert unknown.status_code == 422 and "ANSWER_REQUIRED" in unknown.text
    await desk.world.run("api", "", selection=accept(asked, "no"))
    stale = await client.post("/answer/confirm", data={**chosen, "option": "yes"})
    assert stale.status_code == 409 and "INTERACTION_NOT_ACTIVE" in stale.text
    assert desk.payments.calls == []
