"""What the inspector shows an operator is true and no more than they may read, on SQLite and
PostgreSQL, through a real server on loopback and a headless Chromium:

- the uncertain queue shows the key the provider received (the served agent's own function);
- a thread with an uncertain write is not "blocked": only that write's key is held;
- rows, links, the pager's cursor and the deploy check pass ``authorize``; the full-store scan
  is an operator's POST with the CSRF token, and logged;
- every id round-trips through every link (a property over the id alphabet the store accepts);
- a session ends on the server at logout, token removal and role change.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import closing
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from starlette.applications import Starlette
from starlette.routing import Mount

from intention_kernel.contracts.ids import MAX_ID_LENGTH, validate_idempotency_key
from intention_kernel.contracts.inspect import StoreInspector
from intention_kernel.contracts.receipts import ReceiptStatus
from intention_kernel.http import BearerTokens, Principal, hash_token
from intention_kernel.http.inspector import create_inspector
from tests.cli.support import Provider, commit_turn, uncertain_turn
from tests.http.support import make_desk

from .harness import SECRET, Live, Turns, navigate

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

SECRETS = {
    "alice": "alice-token-0001",  # operator, reads every thread
    "bob": "bob-token-000002",  # viewer, not the secret-* threads
    "carol": "carol-token-0003",  # operator, not the secret-* threads
}
ROLES = {"alice": "operator", "bob": "viewer", "carol": "operator"}
NASTY = ["acme", "acme#2", "a/b", "x/../../evil", "..", "?q=1&after=z", "50% off+tax", " lead"]
VISIBLE_OLD = "old-visible"
SECRET_OLD = "secret-old"
PAGE_SIZE = 2
FIXTURE_IDS = frozenset([*NASTY, "secret-1", "secret-2", VISIBLE_OLD, SECRET_OLD])
"""Threads the fixture seeds through the agent: the property test writes only other ids."""


def authorize(principal: Principal, thread_id: str, action: str) -> bool:
    return principal.id == "alice" or not thread_id.startswith("secret")


def tokens_text(roles: dict[str, str]) -> str:
    return "".join(f"{who} {hash_token(SECRETS[who])} {role}\n" for who, role in roles.items())


class Guarded(Live):
    """The inspector alone at ``/inspect`` with ``authorize``, a tokens file read again when
    it changes, pages of two threads, over threads with ids a path cannot carry."""

    tokens: Path
    lost: list[str]
    secret_lost: str

    async def _start(self) -> None:
        self.store = await self._open()
        self.desk = make_desk(self.store)
        self.lost = ["acme#2", "x/../../evil"]
        self.secret_lost = "secret-1"
        for thread in [*NASTY, "secret-2"]:
            if thread not in self.lost:
                await Turns(self.desk, thread).say("Is breakfast included?")
        for thread in [*self.lost, self.secret_lost]:
            turns = Turns(self.desk, thread)
            interaction = await turns.to_confirmation()
            self.desk.provider.lose_next_response = True
            assert "being verified" in (await turns.accept(interaction)).response.text
        for thread in (VISIBLE_OLD, SECRET_OLD):  # stored by another definition
            await commit_turn(self.store, thread, "turn-1")
        self.tokens = self.directory / "tokens"
        self.tokens.write_text(tokens_text(ROLES))
        inspector = create_inspector(
            self.store,
            authenticate=BearerTokens.from_file(self.tokens),
            agent=self.desk.agent,
            authorize=authorize,
            session_secret=SECRET,
            page_size=PAGE_SIZE,
        )
        app = Starlette(routes=[Mount("/inspect", app=inspector)])
        await self._serve(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def guarded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Guarded]:
    running = Guarded(request.param, tmp_path_factory.mktemp(f"guarded-{request.param}"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


class Links(HTMLParser):
    """Every ``<a href>`` of a page with its text, the ``h1``'s text and the CSRF token."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str]] = []
        self.h1 = ""
        self.csrf = ""
        self._href: str | None = None
        self._text = ""
        self._in_h1 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a" and found.get("href") is not None:
            self._href, self._text = found["href"], ""
        elif tag == "h1":
            self._in_h1 = True
        elif tag == "input" and found.get("name") == "csrf":
            self.csrf = found.get("value") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, self._text))
            self._href = None
        elif tag == "h1":
            self._in_h1 = False

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text += data
        if self._in_h1:
            self.h1 += data


def parse(html: str) -> Links:
    links = Links()
    links.feed(html)
    return links


def login(live: Live, who: str) -> tuple[httpx.Client, str]:
    """A client with a session of ``who`` (through the login form) and its CSRF token."""
    client = httpx.Client(base_url=live.url, timeout=30, follow_redirects=False)
    form = parse(client.get("/inspect/login").text)
    answer = client.post(
        "/inspect/login",
        data={"csrf": form.csrf, "next": "/inspect/threads", "token": SECRETS[who]},
    )
    assert answer.status_code == 303, answer.text
    page = client.get("/inspect/threads")
    assert page.status_code == 200, page.text
    return client, parse(page.text).csrf


def follow(client: httpx.Client, page: httpx.Response, text: str) -> httpx.Response:
    """Open the link whose text is exactly ``text``, as a browser resolves its ``href``."""
    hrefs = [href for href, shown in parse(page.text).links if shown == text]
    assert hrefs, (text, parse(page.text).links)
    target = urljoin(str(page.url), hrefs[0])
    assert urlsplit(target).path.startswith("/inspect/"), target  # never leaves the inspector
    opened = client.get(target)
    assert opened.status_code == 200, (target, opened.text[:500])
    return opened


# ---------------------------------------------------------------- 6. the provider's key


def test_the_served_queue_shows_the_key_the_provider_received(live: Live) -> None:
    """``create_app(agent)`` without ``provider_key=``, as ``serve`` builds it: the queue and
    the receipt page show exactly the keys the fake provider recorded for the lost bookings."""
    client, _ = login(live, "alice")
    with closing(client):
        queue = client.get("/inspect/receipts")
        assert queue.status_code == 200
        for thread in live.seeded.lost:
            receipt = live.uncertain(thread)
            row = re.search(
                r"<tr>\s*<td><time[^>]*>[^<]*</time></td>\s*<th scope=\"row\"><a [^>]*>"
                + re.escape(thread)
                + r"</a></th>(.*?)</tr>",
                queue.text,
                re.S,
            )
            assert row is not None, queue.text[:3000]
            shown = re.findall(r"<code>([^<]+)</code>", row.group(1))
            assert shown[0] == receipt.idempotency_key
            provider_key = shown[1]
            assert live.desk.provider.calls[provider_key] == 1  # what the provider received
            assert live.desk.provider.find(provider_key) is not None
            assert receipt.id not in row.group(1)  # not the receipt id it never saw
            page = client.get(
                "/inspect/receipt",
                params={"thread": thread, "key": receipt.idempotency_key},
            )
            assert f"<code>{provider_key}</code>" in page.text
    recorded = {k for k, n in live.desk.provider.calls.items() if n}
    assert len(recorded) == 3  # one booked, two lost: no other key reached the provider


# ---------------------------------------------------------------- 7. what is blocked


def test_an_uncertain_write_holds_its_key_not_the_thread(
    guarded: Guarded, browser: WebDriver
) -> None:
    thread = guarded.lost[0]
    receipt = guarded.uncertain(thread)
    log_in_as(browser, guarded, "alice", "/receipts")
    navigate(browser, browser.find_element(By.LINK_TEXT, thread).click)
    verdict = browser.find_element(By.ID, "verdict").text
    assert "Blocked" not in verdict and "Nothing blocks the next turn" in verdict
    assert "Held until reconciled" in verdict and receipt.idempotency_key in verdict
    finding = browser.find_element(By.CSS_SELECTOR, "ul.findings").text
    assert f"holds {receipt.idempotency_key}" in finding and "(blocking)" not in finding

    async def next_turns() -> tuple[Any, Any]:
        turns = Turns(guarded.desk, thread)
        turns.count = 10
        answered = await turns.say("Is breakfast included?")
        proposed = await turns.say("Book it")
        return answered, await turns.accept(proposed.checkpoint.interaction)

    answered, again = guarded.call(next_turns())
    assert answered.response.text == "Breakfast is included at every hotel we book."
    assert "being verified" in again.response.text  # the same key fails closed
    assert guarded.uncertain(thread).status is ReceiptStatus.UNCERTAIN


def readable(live: Guarded, who: str, *, uncertain: bool = False) -> list[str]:
    """The store's threads (with an uncertain write) that ``who`` may read."""

    async def collect() -> list[str]:
        if uncertain:
            rows = await live.store.list_receipts(status=ReceiptStatus.UNCERTAIN, limit=1000)
            return sorted({r.thread_id for r in rows})
        found: list[str] = []
        after: str | None = None
        while True:
            page = await cast(StoreInspector, live.store).list_threads(after=after, limit=100)
            found += [t.thread_id for t in page]
            if len(page) < 100:
                return found
            after = page[-1].thread_id

    principal = Principal(who)
    return [t for t in live.call(collect()) if authorize(principal, t, "read")]


def log_in_as(driver: WebDriver, live: Guarded, who: str, path: str) -> None:
    driver.delete_all_cookies()
    driver.get(live.page(path))
    assert "/login" in driver.current_url
    driver.find_element(By.ID, "token").send_keys(SECRETS[who])
    navigate(driver, driver.find_element(By.CSS_SELECTOR, "main form button[type=submit]").click)
    assert "/login" not in driver.current_url, driver.page_source[:2000]


# ---------------------------------------------------------------- 9. authorize everywhere


def test_the_pager_shows_and_links_only_readable_threads(
    guarded: Guarded, browser: WebDriver
) -> None:
    for who in ("bob", "alice"):
        log_in_as(browser, guarded, who, "/threads")
        seen: list[str] = []
        while True:
            ids = [
                str(e.get_attribute("textContent"))
                for e in browser.find_elements(By.CSS_SELECTOR, "main tbody th a")
            ]
            assert 0 < len(ids) <= PAGE_SIZE, (who, seen)
            seen += ids
            nexts = browser.find_elements(By.LINK_TEXT, "Next page")
            if not nexts:
                break
            after = parse_qs(urlsplit(str(nexts[0].get_attribute("href"))).query)["after"]
            assert after == [ids[-1]]  # the cursor is a row shown here
            navigate(browser, nexts[0].click)
        expected = readable(guarded, who)
        assert sorted(seen) == sorted(expected), who
        assert (who == "alice") == any(t.startswith("secret") for t in seen)


def test_the_queue_and_a_refused_thread_tell_nothing(guarded: Guarded) -> None:
    client, _ = login(guarded, "bob")
    with closing(client):
        queue = client.get("/inspect/receipts")
        shown = {t for h, t in parse(queue.text).links if "/inspect/thread?" in h}
        assert shown == set(readable(guarded, "bob", uncertain=True)) and shown
        assert "secret" not in queue.text
        refused = client.get("/inspect/thread", params={"id": guarded.secret_lost})
        assert refused.status_code == 403 and "secret-1" not in refused.text.replace(
            "bob may not read on this thread", ""
        )


def test_the_deploy_check_is_an_operators_post_over_readable_threads(
    guarded: Guarded, caplog: pytest.LogCaptureFixture
) -> None:
    bob, bob_csrf = login(guarded, "bob")
    carol, carol_csrf = login(guarded, "carol")
    with closing(bob), closing(carol):
        get = bob.get("/inspect/deploy", params={"run": "1"})  # a GET never scans
        assert get.status_code == 200
        assert "Report" not in get.text and "secret" not in get.text
        assert "Only an operator may run the check" in get.text
        viewer = bob.post("/inspect/deploy", data={"csrf": bob_csrf})
        assert viewer.status_code == 403 and "FORBIDDEN" in viewer.text
        forged = carol.post("/inspect/deploy", data={"csrf": "forged"})
        assert forged.status_code == 403 and "CSRF_REJECTED" in forged.text
        with caplog.at_level(logging.INFO, logger="intention_kernel.http.inspector"):
            ran = carol.post("/inspect/deploy", data={"csrf": carol_csrf})
        assert ran.status_code == 200, ran.text
        assert "secret" not in ran.text
        count = len(readable(guarded, "carol"))
        assert f"Checkpoints scanned (of the threads you may read): {count}<" in ran.text
        assert VISIBLE_OLD in [text for _, text in parse(ran.text).links]
        assert any("deploy check run by carol" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------- 10. ids in links


def test_ids_a_path_cannot_carry_open_their_own_pages(guarded: Guarded, browser: WebDriver) -> None:
    log_in_as(browser, guarded, "alice", "/receipts")
    thread = "acme#2"
    key = guarded.uncertain(thread).idempotency_key
    navigate(browser, browser.find_element(By.LINK_TEXT, thread).click)
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Thread {thread}"
    navigate(browser, browser.find_element(By.LINK_TEXT, key).click)
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Receipt {key}"
    navigate(browser, browser.find_element(By.LINK_TEXT, thread).click)
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Thread {thread}"  # not "acme"
    for other in ("a/b", "x/../../evil", ".."):
        browser.get(guarded.page("/threads"))
        while not browser.find_elements(By.LINK_TEXT, other):
            navigate(browser, browser.find_element(By.LINK_TEXT, "Next page").click)
        navigate(browser, browser.find_element(By.LINK_TEXT, other).click)
        assert browser.current_url.startswith(guarded.page("/thread?"))
        assert browser.find_element(By.TAG_NAME, "h1").text == f"Thread {other}"


_ALPHABET = st.characters(blacklist_categories=("Cc", "Cf", "Zl", "Zp", "Cs"))
"""What ``validate_id`` accepts: no controls, format characters, separators or surrogates."""
_IDS = st.one_of(
    st.sampled_from(["acme#3", "b/c", "y/../../evil", "...", "?q=2&after=y", "%2F", "a b", "+"]),
    st.sampled_from(["ü/#?&=;", "\U0001f600", "  two leading", "trailing  ", "/", "#", "%"]),
    st.text(_ALPHABET, min_size=1, max_size=40),
).filter(lambda s: bool(s.strip()) and s not in FIXTURE_IDS)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(thread=_IDS, key=st.text(_ALPHABET, min_size=1, max_size=40).filter(str.strip))
def test_every_id_round_trips_through_every_link(guarded: Guarded, thread: str, key: str) -> None:
    """Queue -> thread -> receipt -> thread, and the pager, for any id and key the store takes."""
    assert len(thread) <= MAX_ID_LENGTH
    ledger_key = validate_idempotency_key(f"payments.charge:{key}")

    async def seed() -> None:
        if await guarded.store.get_receipt(thread, ledger_key) is None:
            await commit_turn(guarded.store, thread, "prop-1")
            await uncertain_turn(guarded.store, thread, "prop-2", key, Provider())

    guarded.call(seed())
    client, _ = login(guarded, "alice")
    with closing(client):
        queue = client.get("/inspect/receipts")
        page = follow(client, queue, thread)
        assert parse(page.text).h1 == f"Thread {thread}"
        receipt = follow(client, page, ledger_key)
        assert parse(receipt.text).h1 == f"Receipt {ledger_key}"
        back = follow(client, receipt, thread)
        assert parse(back.text).h1 == f"Thread {thread}" and back.url == page.url
        # The pager of uncertain threads reaches this one, each cursor an id shown before it.
        listing = client.get("/inspect/threads", params={"uncertain": "1"})
        seen: list[str] = []
        for _ in range(200):
            shown = [t for h, t in parse(listing.text).links if "/inspect/thread?" in h]
            seen += shown
            nexts = [h for h, t in parse(listing.text).links if t == "Next page"]
            if not nexts:
                break
            assert parse_qs(urlsplit(nexts[0]).query, keep_blank_values=True)["after"] == [
                shown[-1]
            ]
            listing = client.get(urljoin(str(listing.url), nexts[0]))
        assert thread in seen and len(seen) == len(set(seen))


# ---------------------------------------------------------------- 11. sessions end


def test_logout_ends_the_session_on_the_server(guarded: Guarded, browser: WebDriver) -> None:
    client, csrf = login(guarded, "bob")
    copied = client.cookies.get("ik_inspector")
    assert copied
    with closing(client):
        assert client.post("/inspect/logout", data={"csrf": csrf}).status_code == 303
    with httpx.Client(base_url=guarded.url, timeout=30, follow_redirects=False) as thief:
        thief.cookies.set("ik_inspector", copied, path="/inspect")
        page = thief.get("/inspect/threads")
        assert page.status_code == 303 and page.headers["location"].startswith("/inspect/login")
        posted = thief.post("/inspect/logout", data={"csrf": csrf})
        assert posted.status_code == 401 and "UNAUTHENTICATED" in posted.text
    # The same in the browser: the cookie copied before "Log out" opens nothing after it.
    log_in_as(browser, guarded, "bob", "/threads")
    cookie = browser.get_cookie("ik_inspector")
    assert cookie is not None
    navigate(browser, browser.find_element(By.XPATH, "//button[text()='Log out']").click)
    browser.add_cookie({"name": "ik_inspector", "value": cookie["value"], "path": "/inspect"})
    browser.get(guarded.page("/threads"))
    assert "/login" in browser.current_url


def test_token_removal_and_a_role_change_apply_at_once(guarded: Guarded) -> None:
    bob, _ = login(guarded, "bob")
    carol, csrf = login(guarded, "carol")
    thread = guarded.lost[1]
    key = guarded.uncertain(thread).idempotency_key
    form = {
        "csrf": csrf,
        "thread": thread,
        "key": key,
        "outcome": "not_applied",
        "value": "",
        "note": "checked",
        "correct": "0",
    }
    try:
        with closing(bob), closing(carol):
            shown = carol.post("/inspect/reconcile/confirm", data=form)
            assert shown.status_code == 200 and "Record this decision" in shown.text
            guarded.tokens.write_text(tokens_text({"alice": "operator", "carol": "viewer"}))
            removed = bob.get("/inspect/threads")
            assert removed.status_code == 303 and "/inspect/login" in removed.headers["location"]
            demoted = carol.post("/inspect/reconcile/confirm", data=form)
            assert demoted.status_code == 403 and "is a viewer" in demoted.text
            assert carol.get("/inspect/threads").status_code == 200  # still a viewer
    finally:
        guarded.tokens.write_text(tokens_text(ROLES))
    assert guarded.uncertain(thread).status is ReceiptStatus.UNCERTAIN
