"""The inspector in a real headless Chromium against a live server on SQLite and PostgreSQL:
log in, page, search and filter threads, read a thread, see hostile text as text, reconcile an
uncertain write through the confirmation page, then the next turn replays the value without
calling the provider. Accessibility: one h1, headings in order, a label for every input,
captions and scoped headers, the skip link and the reconcile form's focus order."""

from __future__ import annotations

import json
from contextlib import closing
from itertools import pairwise
from typing import Any

import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from intention_kernel.contracts.receipts import ReceiptStatus

from .harness import HOSTILE, Live, Turns, log_in, navigate, provider_key, session_client

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def texts(driver: WebDriver, selector: str) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def thread_ids(driver: WebDriver) -> list[str]:
    return texts(driver, "main table tbody th[scope=row]")


def check_accessible(driver: WebDriver) -> None:
    """One h1, no skipped heading level, a label for every field, tables with captions and
    scoped headers, the skip link first in the tab order (on a page just loaded)."""
    ActionChains(driver).send_keys(Keys.TAB).perform()
    first = driver.switch_to.active_element
    assert first.get_attribute("class") == "skip" and str(first.get_attribute("href")).endswith(
        "#main"
    )
    levels = [
        int(h.tag_name[1]) for h in driver.find_elements(By.CSS_SELECTOR, "h1,h2,h3,h4,h5,h6")
    ]
    assert levels.count(1) == 1 and levels[0] == 1, levels
    assert all(b - a <= 1 for a, b in pairwise(levels)), levels
    unlabelled = driver.execute_script(
        """
        return Array.from(document.querySelectorAll('input, textarea, select'))
          .filter(e => e.type !== 'hidden')
          .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
          .map(e => e.outerHTML);
        """
    )
    assert unlabelled == []
    for table in driver.find_elements(By.CSS_SELECTOR, "table"):
        assert table.find_element(By.TAG_NAME, "caption").text.strip()
        headers = table.find_elements(By.TAG_NAME, "th")
        assert headers and all(h.get_attribute("scope") in ("col", "row") for h in headers)


def no_script_ran(driver: WebDriver) -> None:
    try:
        alert = driver.switch_to.alert
    except NoAlertPresentException:
        alert = None
    assert alert is None, "a stored text ran as script"
    assert driver.execute_script("return window.__xss === undefined")


def test_log_in_page_search_and_filter(live: Live, browser: WebDriver) -> None:
    log_in(browser, live, "alice")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Threads"
    check_accessible(browser)
    first = thread_ids(browser)
    assert len(first) == 50 and first == sorted(first)
    navigate(browser, browser.find_element(By.LINK_TEXT, "Next page").click)
    second = thread_ids(browser)
    assert second and second[0] > first[-1]
    assert set(first).isdisjoint(second)
    assert len(first) + len(second) == 55 + 5
    navigate(browser, browser.find_element(By.LINK_TEXT, "First page").click)
    search = browser.find_element(By.ID, "q")
    search.clear()
    search.send_keys("traveller")
    browser.find_element(By.ID, "f-uncertain").click()
    navigate(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button").click)
    assert thread_ids(browser) == live.seeded.lost
    assert browser.find_element(By.ID, "f-uncertain").is_selected()
    browser.get(live.page("/threads?pending=1"))
    assert thread_ids(browser) == [live.seeded.pending]
    assert "confirmation" in browser.find_element(By.CSS_SELECTOR, "main tbody").text
    browser.get(live.page("/threads?incompatible=1"))
    assert thread_ids(browser) == []
    browser.get(live.page("/threads?q=traveller"))
    navigate(browser, browser.find_element(By.LINK_TEXT, live.seeded.lost[0]).click)
    page = browser.find_element(By.TAG_NAME, "main").text
    assert "Blocked" not in page and "uncertain receipt" in page  # the write, not the thread
    receipt = live.uncertain(live.seeded.lost[0])
    verdict = browser.find_element(By.ID, "verdict").text
    assert "Nothing blocks the next turn" in verdict and "Held until reconciled" in verdict
    assert receipt.idempotency_key in verdict
    assert "being verified" in page  # the turn's response
    assert "Agent fingerprint" in page and "Outbox events" in page
    assert "effect.uncertain" in page
    check_accessible(browser)


def test_stored_text_is_shown_as_text(live: Live, browser: WebDriver) -> None:
    log_in(browser, live, "bob", f"/threads/{live.seeded.hostile}")
    message = browser.find_element(By.CSS_SELECTOR, "li.message.user p.text")
    assert message.text == HOSTILE
    assert browser.find_elements(By.CSS_SELECTOR, "main img, main script") == []
    no_script_ran(browser)
    turns = browser.find_element(By.ID, "turns-h").find_element(By.XPATH, "..").text
    assert "<script>window.__xss = 1; alert(1)</script>" in turns
    no_script_ran(browser)


def test_reconcile_from_the_queue(live: Live, browser: WebDriver) -> None:
    thread = live.seeded.lost[0]
    receipt = live.uncertain(thread)
    key = provider_key(receipt)
    booking = live.desk.provider.find(key)
    assert booking is not None  # the provider applied it; the answer was lost
    calls = live.desk.provider.calls[key]
    log_in(browser, live, "alice", "/receipts")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Uncertain writes"
    rows = browser.find_elements(By.CSS_SELECTOR, "main tbody tr")
    assert [r.find_element(By.CSS_SELECTOR, "th").text for r in rows] == live.seeded.lost
    assert key in rows[0].text  # the provider's key, to look the write up
    check_accessible(browser)
    navigate(browser, rows[0].find_element(By.PARTIAL_LINK_TEXT, "Review").click)
    check_accessible(browser)

    # Keyboard only: the form's fields in order.
    browser.find_element(By.ID, "outcome-completed").send_keys(Keys.SPACE)
    order = [browser.switch_to.active_element.get_attribute("id")]
    for _ in range(3):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        active = browser.switch_to.active_element
        order.append(active.get_attribute("id") or active.text)
    assert order == ["outcome-completed", "value", "note", "Review the record"]
    browser.find_element(By.ID, "value").send_keys(json.dumps(booking))
    browser.find_element(By.ID, "note").send_keys("found in the provider's dashboard")
    browser.switch_to.active_element.send_keys(Keys.TAB)
    navigate(browser, lambda: browser.switch_to.active_element.send_keys(Keys.ENTER))

    assert browser.find_element(By.TAG_NAME, "h1").text == "Confirm the reconciliation"
    record = browser.find_element(By.ID, "record").text
    for shown in (thread, receipt.idempotency_key, "completed", "alice", booking["booking_id"]):
        assert shown in record
    assert "found in the provider's dashboard" in record
    check_accessible(browser)
    assert live.uncertain(thread).status is ReceiptStatus.UNCERTAIN  # nothing written yet
    navigate(
        browser, browser.find_element(By.XPATH, "//button[text()='Record this decision']").click
    )

    assert "Recorded" in browser.find_element(By.CSS_SELECTOR, "[role=status]").text
    history = browser.find_element(By.ID, "history-h").find_element(By.XPATH, "..").text
    assert "alice" in history and "found in the provider's dashboard" in history
    [audit] = live.call(live.store.reconciliations(thread_id=thread))
    assert (audit.actor, audit.outcome, audit.value) == ("alice", "completed", booking)

    # The next booking turn replays the reconciled value: no provider call.
    async def book_again() -> Any:
        turns = Turns(live.desk, thread)
        turns.count = 4
        proposed = await turns.say("Book it")
        return await turns.accept(proposed.checkpoint.interaction)

    done = live.call(book_again())
    assert f"Booked: Alfama Inn, 2 nights, 240 EUR (booking {booking['booking_id']})" in (
        done.response.text
    )
    assert live.desk.provider.calls[key] == calls
    browser.get(live.page("/receipts"))
    assert thread_ids(browser) == live.seeded.lost[1:]


def test_a_viewer_reads_but_cannot_reconcile(live: Live, browser: WebDriver) -> None:
    thread = live.seeded.lost[1]
    receipt = live.uncertain(thread)
    log_in(browser, live, "bob", "/receipts")
    navigate(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "Review").click)
    assert browser.find_elements(By.ID, "reconcile-form") == []
    assert "Only an operator may reconcile" in browser.find_element(By.TAG_NAME, "main").text
    client, csrf = session_client(live, "bob")
    with closing(client):
        form = {
            "csrf": csrf,
            "thread": thread,
            "key": receipt.idempotency_key,
            "outcome": "not_applied",
            "value": "",
            "note": "viewer tries",
            "correct": "0",
            "confirmed": "1",
        }
        for path in ("/inspect/reconcile/confirm", "/inspect/reconcile"):
            refused = client.post(path, data=form)
            assert refused.status_code == 403, refused.text
            assert "FORBIDDEN" in refused.text
    assert live.uncertain(thread).status is ReceiptStatus.UNCERTAIN


def test_forms_need_the_session_csrf_token_and_this_origin(live: Live) -> None:
    thread = live.seeded.lost[1]
    receipt = live.uncertain(thread)
    client, csrf = session_client(live, "alice")
    form = {
        "thread": thread,
        "key": receipt.idempotency_key,
        "outcome": "not_applied",
        "value": "",
        "note": "checked",
        "correct": "0",
        "confirmed": "1",
    }
    with closing(client):
        for token in (None, "", "wrong-token", csrf + "x"):
            sent = dict(form) if token is None else {**form, "csrf": token}
            refused = client.post("/inspect/reconcile", data=sent)
            assert refused.status_code == 403 and "CSRF_REJECTED" in refused.text
        other = client.post(
            "/inspect/reconcile",
            data={**form, "csrf": csrf},
            headers={"Origin": "http://evil.example"},
        )
        assert other.status_code == 403 and "CROSS_ORIGIN" in other.text
        assert live.uncertain(thread).status is ReceiptStatus.UNCERTAIN
        shown = client.post(
            "/inspect/reconcile/confirm", data={**form, "csrf": csrf}, headers={"Origin": live.url}
        )
        assert shown.status_code == 200 and "Record this decision" in shown.text
        assert live.uncertain(thread).status is ReceiptStatus.UNCERTAIN  # only shown
        # Without a session: nothing is read or written.
        anonymous = client.post("/inspect/logout", data={"csrf": csrf})
        assert anonymous.status_code == 303
    with httpx_client(live) as stranger:
        assert stranger.post("/inspect/reconcile", data={**form, "csrf": csrf}).status_code == 401
        assert stranger.get("/inspect/threads").headers["location"].startswith("/inspect/login")


def httpx_client(live: Live) -> Any:
    import httpx

    return httpx.Client(base_url=live.url, timeout=30, follow_redirects=False)


def test_deploy_check_and_log_out(live: Live, browser: WebDriver) -> None:
    log_in(browser, live, "alice", "/deploy")  # an operator's action (POST)
    navigate(browser, browser.find_element(By.XPATH, "//button[text()='Run the check']").click)
    assert (
        "ok: every stored checkpoint loads under this agent"
        in browser.find_element(By.CSS_SELECTOR, "[role=status]").text
    )
    check_accessible(browser)
    navigate(browser, browser.find_element(By.XPATH, "//button[text()='Log out']").click)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Log in"
    check_accessible(browser)
    browser.get(live.page("/threads"))
    assert "/login" in browser.current_url


def test_a_wrong_token_is_refused(live: Live, browser: WebDriver) -> None:
    browser.delete_all_cookies()
    browser.get(live.page("/login"))
    browser.find_element(By.ID, "token").send_keys("not-a-token-at-all")
    navigate(browser, browser.find_element(By.CSS_SELECTOR, "main form button").click)
    assert "not valid" in browser.find_element(By.CSS_SELECTOR, "[role=alert]").text
    browser.get(live.page("/threads"))
    assert "/login" in browser.current_url
