"""The thread page in headless Chromium shows an approval with edits: which fields were edited,
the approved question and who answered (the inspector reads it; it does not answer)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from ..kernel.support import make_world, support_agent
from ..kernel.writes import CHARGE, CHARGE_42, Payments, accept
from .harness import Live, log_in

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def test_an_edited_approval_shows_the_edited_fields_and_the_approved_question(
    live: Live, browser: WebDriver
) -> None:
    payments = Payments()
    world = make_world(
        live.store,
        agent=support_agent([replace(CHARGE, editable=("amount",))]),
        ports={"payments": payments},
    )
    world.say("charge 42", CHARGE_42)
    thread = "edited-approval"
    proposed = live.call(world.run("ask", "charge 42", thread_id=thread))
    selection = {**accept(proposed), "edits": {"amount": 7}}
    live.call(
        world.run("edit", "", thread_id=thread, selection=selection, host_context={"actor": "ann"})
    )
    assert payments.calls == ["payments.charge:order:42"]

    log_in(browser, live, "bob", f"/threads/{thread}")
    rows = browser.find_elements(By.CSS_SELECTOR, "section[aria-labelledby=turns-h] tbody tr")
    [row] = [r for r in rows if r.find_element(By.TAG_NAME, "th").text == "edit"]
    cell = row.find_elements(By.TAG_NAME, "td")[1]
    assert cell.text.startswith("accepted with edits to amount: Please confirm: Charge")
    assert "amount: 7" in cell.text and "amount: 5" not in cell.text
    assert cell.text.endswith("(accepted via selection, by ann)")
