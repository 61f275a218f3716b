"""The thread page in headless Chromium (SQLite and PostgreSQL): a button press is shown as
what was chosen, with the question the user answered and who answered it."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from .harness import Live, log_in

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def test_a_selection_turn_shows_the_choice_and_the_approval_actor(
    live: Live, browser: WebDriver
) -> None:
    thread = live.seeded.booked
    [pressed] = [
        t
        for t in live.call(live.store.list_turns(thread))
        if not t.checkpoint.messages[-2].text  # the accepting turn: a selection, no text
    ]
    asked = live.call(live.store.get_turn(thread, f"turn-{pressed.checkpoint.revision - 1}"))
    assert asked is not None and asked.checkpoint.interaction is not None
    question = asked.checkpoint.interaction.prompt
    assert question.startswith("Please confirm: Book the quoted stay (quote_id: ")

    log_in(browser, live, "bob", f"/threads/{thread}")
    rows = browser.find_elements(By.CSS_SELECTOR, "section[aria-labelledby=turns-h] tbody tr")
    [row] = [r for r in rows if r.find_element(By.TAG_NAME, "th").text == pressed.turn_id]
    cell = row.find_elements(By.TAG_NAME, "td")[1]
    assert cell.text == f"accepted: {question} (accepted via selection, by traveller)"
    hint = cell.find_element(By.CSS_SELECTOR, "span.answer")
    assert hint.text == "(accepted via selection, by traveller)"
