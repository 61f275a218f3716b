"""Operators answer a pending confirmation from the thread page, in a headless Chromium against
the HTTP service with the inspector (``create_app(..., inspector=True)``) on SQLite and
PostgreSQL, over a payments agent whose charge may be edited in its amount only (at least 1; a
policy refuses more than 100):

- an approval with an edited amount is reviewed (proposed and approved values, the actor), then
  runs the write once with the edited amount, recorded with the operator as the actor; the form
  is used from the keyboard alone;
- an amount that is not a whole number, one the schema refuses and one the policy refuses are
  shown on the page with their fields, and run nothing; the confirmation stays open;
- an edit of the locked order id (a crafted form, at the review and at the run) is refused and
  runs nothing;
- a decline runs nothing; an answer to a confirmation answered meanwhile runs nothing;
- a viewer sees the question and the proposed arguments, no form, and a forged POST is refused;
  a POST without the session's CSRF token, with another, from another origin or without a
  session is refused; the same confirmed form sent twice runs the write once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from intention_kernel.http import BearerTokens, create_app, server_config
from intention_kernel.kernel import PolicyRequest, allow, deny
from tests.http.support import TOKENS

from ..kernel.support import World, make_world, support_agent
from ..kernel.writes import CHARGE, Payments
from .harness import ROLES, SECRET, Live, log_in, navigate, session_client
from .test_browser import check_accessible

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


class Bounded(BaseModel):
    order_id: str
    amount: int = Field(ge=1)


BOUNDED = replace(CHARGE, input_schema=Bounded, editable=("amount",))
"""The payments charge with a positive amount, which a reviewer may edit (the order id not)."""


def at_most_100(request: PolicyRequest) -> Any:
    amount = request.input.get("amount")
    return deny("That is above the limit.") if isinstance(amount, int) and amount > 100 else allow()


class Answering(Live):
    """The HTTP service with the inspector at ``/inspect``, serving the payments agent."""

    world: World
    payments: Payments

    async def _start(self) -> None:
        self.store = await self._open()
        self.payments = Payments()
        self.world = make_world(
            self.store,
            agent=support_agent([BOUNDED], policies=[at_most_100]),
            ports={"payments": self.payments},
        )
        app = create_app(
            self.world.agent,
            authenticate=BearerTokens.from_secrets(TOKENS, ROLES),
            inspector=True,
            session_secret=SECRET,
        )
        await self._serve(server_config(app, host="127.0.0.1", port=0, log_level="warning"))

    def ask(self, thread: str, order: str) -> str:
        """A charge of 5 for ``order`` on ``thread``, waiting for consent: its interaction id."""
        text = f"charge {order}"
        self.world.say(
            text, [{"capability": "payments.charge", "input": {"order_id": order, "amount": 5}}]
        )
        result = self.call(self.world.run("ask", text, thread_id=thread))
        interaction = result.checkpoint.interaction
        assert interaction is not None and interaction.kind == "confirmation"
        return str(interaction.id)

    def charged(self, order: str) -> list[int]:
        """The amounts the provider charged for ``order`` (one entry per call)."""
        key = f"payments.charge:order:{order}"
        return [int(self.payments.charges[key]["amount"]) for c in self.payments.calls if c == key]

    def waiting(self, thread: str) -> str | None:
        """The id of the interaction ``thread`` waits on now."""
        checkpoint = self.call(self.store.load_checkpoint(thread))
        assert checkpoint is not None
        return None if checkpoint.interaction is None else checkpoint.interaction.id


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def answering(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Answering]:
    running = Answering(request.param, tmp_path_factory.mktemp(f"answer-{request.param}"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def open_thread(browser: WebDriver, live: Answering, who: str, thread: str) -> None:
    log_in(browser, live, who, f"/thread?id={thread}")
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Thread {thread}"


def set_amount(browser: WebDriver, text: str) -> None:
    field = browser.find_element(By.NAME, "edit.amount")
    field.clear()
    field.send_keys(text)


def review(browser: WebDriver, option: str = "yes") -> None:
    browser.find_element(
        By.CSS_SELECTOR, f"#answer-form input[name=option][value={option}]"
    ).click()
    navigate(browser, browser.find_element(By.XPATH, "//button[text()='Review the answer']").click)


def run(browser: WebDriver) -> None:
    assert browser.find_element(By.TAG_NAME, "h1").text == "Confirm the answer"
    navigate(browser, browser.find_element(By.XPATH, "//button[text()='Run this answer']").click)


def refusal(browser: WebDriver) -> str:
    return browser.find_element(By.ID, "answer-error").text


def add_field(browser: WebDriver, form: str, name: str, value: str) -> None:
    """Add a field to a form, as a crafted request would."""
    browser.execute_script(
        "const input = document.createElement('input');"
        "input.type = 'hidden'; input.name = arguments[1]; input.value = arguments[2];"
        "document.querySelector(arguments[0]).appendChild(input);",
        form,
        name,
        value,
    )


def history(browser: WebDriver, turn_prefix: str = "inspector-answer-") -> str:
    rows = browser.find_elements(By.CSS_SELECTOR, "section[aria-labelledby=turns-h] tbody tr")
    [row] = [r for r in rows if r.find_element(By.TAG_NAME, "th").text.startswith(turn_prefix)]
    return str(row.find_elements(By.TAG_NAME, "td")[1].text)


# ---------------------------------------------------------------- approving


def test_an_approval_with_an_edit_runs_the_write_once_with_the_edited_value(
    answering: Answering, browser: WebDriver
) -> None:
    thread, order = "approve-edited", "101"
    asked = answering.ask(thread, order)
    open_thread(browser, answering, "alice", thread)
    check_accessible(browser)
    assert "amount: 5" in browser.find_element(By.ID, "question").text
    assert browser.find_element(By.ID, "fixed-fields").text.split() == ["Order", "Id", order]
    amount = browser.find_element(By.NAME, "edit.amount")
    assert amount.get_attribute("value") == "5"
    assert browser.find_elements(By.NAME, "edit.order_id") == []  # locked: shown, not an input
    hint = browser.find_element(By.ID, str(amount.get_attribute("aria-describedby"))).text
    assert hint == "A whole number; proposed: 5"
    # The keyboard alone: the amount, into the answers (the first is Approve), the button.
    amount.send_keys(Keys.CONTROL, "a")
    amount.send_keys("7", Keys.TAB)
    chosen = browser.switch_to.active_element
    assert chosen.get_attribute("name") == "option" and chosen.get_attribute("value") == "yes"
    chosen.send_keys(Keys.SPACE)
    chosen.send_keys(Keys.TAB)
    button = browser.switch_to.active_element
    assert button.text == "Review the answer"
    navigate(browser, lambda: button.send_keys(Keys.ENTER))

    assert browser.find_element(By.TAG_NAME, "h1").text == "Confirm the answer"
    check_accessible(browser)
    record = browser.find_element(By.ID, "record").text
    assert "approve with edits to amount" in record and "alice" in record
    cells = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#edits tbody tr > *")]
    assert cells == ["amount", "5", "7"]
    assert answering.charged(order) == [] and answering.waiting(thread) == asked  # not yet
    run(browser)

    notice = browser.find_element(By.ID, "answered").text
    assert (
        "accepted with edits to amount" in notice and f"Charged 7 EUR for order {order}." in notice
    )
    assert answering.charged(order) == [7]
    assert answering.waiting(thread) is None and browser.find_elements(By.ID, "answer") == []
    line = history(browser)
    assert line.startswith("accepted with edits to amount: Please confirm: Charge")
    assert "amount: 7" in line and line.endswith("(accepted via selection, by alice)")
    checkpoint = answering.call(answering.store.load_checkpoint(thread))
    assert checkpoint is not None
    decisions = checkpoint.metadata["decisions"]
    assert isinstance(decisions, list)
    [decision] = decisions
    assert isinstance(decision, dict) and decision["actor"] == "alice"
    assert decision["edited"] == ["amount"]
    assert decision["input"] == {"order_id": order, "amount": 7}
    assert decision["proposed_input"] == {"order_id": order, "amount": 5}


# ---------------------------------------------------------------- refusals


def test_an_edit_that_fails_validation_is_shown_and_runs_nothing(
    answering: Answering, browser: WebDriver
) -> None:
    thread, order = "approve-invalid", "102"
    asked = answering.ask(thread, order)
    open_thread(browser, answering, "alice", thread)
    for typed, code, said in [
        ("lots", "EDIT_INVALID", "amount: enter a whole number"),
        ("0", "EDIT_INVALID", "amount: Input should be greater than or equal to 1"),
    ]:
        set_amount(browser, typed)
        review(browser)
        shown = refusal(browser)
        assert shown.startswith(f"{code} the edited input is not valid: amount"), shown
        assert said in shown and "nothing ran and the confirmation still waits" in shown
        field = browser.find_element(By.NAME, "edit.amount")
        assert field.get_attribute("value") == typed  # kept as typed, marked for the reader
        assert field.get_attribute("aria-invalid") == "true"
        assert browser.find_element(By.CSS_SELECTOR, "input[name=option][value=yes]").is_selected()
        check_accessible(browser)
    # A value the review lets through, the agent's policy refuses when the answer runs.
    set_amount(browser, "500")
    review(browser)
    run(browser)
    shown = refusal(browser)
    assert shown.startswith("EDIT_NOT_ALLOWED a policy refuses the edited operation: amount")
    assert "the agent's policy says: That is above the limit." in shown
    assert browser.find_element(By.NAME, "edit.amount").get_attribute("value") == "500"
    assert answering.charged(order) == [] and answering.waiting(thread) == asked
    turns = answering.call(answering.store.list_turns(thread))
    assert [t.turn_id for t in turns] == ["ask"]  # nothing was committed


def test_an_edit_of_a_locked_field_is_refused_and_runs_nothing(
    answering: Answering, browser: WebDriver
) -> None:
    thread, order = "approve-locked", "103"
    asked = answering.ask(thread, order)
    open_thread(browser, answering, "alice", thread)
    # A crafted form edits the order id at the review ...
    add_field(browser, "#answer-form", "edit.order_id", "999")
    review(browser)
    shown = refusal(browser)
    assert shown.startswith(
        "EDIT_NOT_ALLOWED the capability does not allow editing these fields: order_id"
    )
    assert "editable fields: amount" in shown
    # ... and at the run, behind a valid edit: the kernel refuses it there.
    set_amount(browser, "7")
    review(browser)
    add_field(browser, "form[action$='/answer']", "edit.order_id", '"999"')
    run(browser)
    shown = refusal(browser)
    assert shown.startswith(
        "EDIT_NOT_ALLOWED the capability does not allow editing these fields: order_id"
    )
    assert answering.charged(order) == [] and answering.charged("999") == []
    assert answering.waiting(thread) == asked
    assert browser.find_elements(By.ID, "answer-form")  # still open: answer it again


def test_a_decline_runs_nothing(answering: Answering, browser: WebDriver) -> None:
    thread, order = "decline", "104"
    answering.ask(thread, order)
    open_thread(browser, answering, "alice", thread)
    set_amount(browser, "9")  # a decline takes no edits: they are not sent
    review(browser, "no")
    assert "decline" in browser.find_element(By.ID, "record").text
    assert browser.find_elements(By.ID, "edits") == []
    run(browser)
    assert "declined" in browser.find_element(By.ID, "answered").text
    assert answering.charged(order) == [] and answering.waiting(thread) is None
    assert history(browser).endswith("(declined via selection, by alice)")
    checkpoint = answering.call(answering.store.load_checkpoint(thread))
    assert checkpoint is not None and checkpoint.agenda == []


def test_an_answer_to_a_confirmation_answered_meanwhile_runs_nothing(
    answering: Answering, browser: WebDriver
) -> None:
    thread, order = "stale", "105"
    asked = answering.ask(thread, order)
    open_thread(browser, answering, "alice", thread)
    set_amount(browser, "7")
    review(browser)
    declined = {"interaction_id": asked, "option": "no"}
    answering.call(answering.world.run("api-no", "", thread_id=thread, selection=declined))
    run(browser)
    assert refusal(browser).startswith(
        "INTERACTION_NOT_ACTIVE this confirmation was answered or replaced meanwhile: nothing ran"
    )
    assert answering.charged(order) == [] and browser.find_elements(By.ID, "answer") == []


# ---------------------------------------------------------------- who may answer


def _confirmed(page: str) -> dict[str, str]:
    """The hidden fields of the confirmation page's form."""
    start = page.index('action="/inspect/answer"')
    return dict(re.findall(r'name="([^"]+)" value="([^"]*)"', page[start:]))


def test_a_viewer_sees_the_question_and_cannot_answer(
    answering: Answering, browser: WebDriver
) -> None:
    thread, order = "viewer", "106"
    asked = answering.ask(thread, order)
    open_thread(browser, answering, "bob", thread)
    check_accessible(browser)
    assert "amount: 5" in browser.find_element(By.ID, "question").text
    proposed = browser.find_element(By.ID, "proposed-fields").text
    assert order in proposed and "5 (editable)" in proposed
    assert browser.find_elements(By.ID, "answer-form") == []
    hint = browser.find_element(By.ID, "answer-hint").text
    assert hint == "Only an operator may answer this confirmation."
    bob, csrf = session_client(answering, "bob")
    with closing(bob):
        forged = {"csrf": csrf, "thread": thread, "interaction": asked, "option": "yes"}
        for path, data in [
            ("/inspect/answer/confirm", {**forged, "edit.amount": "7"}),
            (
                "/inspect/answer",
                {**forged, "turn": "inspector-answer-" + "0" * 32, "confirmed": "1"},
            ),
        ]:
            refused = bob.post(path, data=data)
            assert refused.status_code == 403 and "bob is a viewer" in refused.text
    assert answering.charged(order) == [] and answering.waiting(thread) == asked


def test_the_answer_forms_need_the_session_and_its_csrf_token(answering: Answering) -> None:
    thread, order = "csrf", "107"
    asked = answering.ask(thread, order)
    alice, csrf = session_client(answering, "alice")
    with closing(alice):
        chosen = {"csrf": csrf, "thread": thread, "interaction": asked, "option": "yes"}
        page = alice.post("/inspect/answer/confirm", data={**chosen, "edit.amount": "8"})
        assert page.status_code == 200 and "Run this answer" in page.text
        confirmed = _confirmed(page.text)
        assert confirmed["edit.amount"] == "8" and confirmed["confirmed"] == "1"
        for path, data in [("/inspect/answer/confirm", chosen), ("/inspect/answer", confirmed)]:
            for token in ("", "forged"):
                forged = alice.post(path, data={**data, "csrf": token})
                assert forged.status_code == 403 and "CSRF_REJECTED" in forged.text
            other = alice.post(path, data=data, headers={"Origin": "http://evil.example"})
            assert other.status_code == 403 and "CROSS_ORIGIN" in other.text
            with httpx.Client(base_url=answering.url, timeout=30) as anonymous:
                answer = anonymous.post(path, data=data)
                assert answer.status_code == 401 and "UNAUTHENTICATED" in answer.text
        unconfirmed = alice.post("/inspect/answer", data={**confirmed, "confirmed": ""})
        assert unconfirmed.status_code == 422 and "NOT_CONFIRMED" in unconfirmed.text
        assert answering.charged(order) == [] and answering.waiting(thread) == asked
        # The confirmed form sent twice (a double click, a reload): the turn replays.
        first = alice.post("/inspect/answer", data=confirmed)
        second = alice.post("/inspect/answer", data=confirmed)
        assert first.status_code == second.status_code == 303
        assert first.headers["location"] == second.headers["location"]
        assert f"answered={confirmed['turn']}" in first.headers["location"]
    assert answering.charged(order) == [8] and answering.waiting(thread) is None
