"""The turn inbox in the inspector, through a real server on loopback and a headless Chromium:

- the requests page lists dead, pending and running requests (store-wide, a state at a time
  with its pager, and on a thread's page) with their age, attempts, not_before, claim and
  error, and nothing of a thread ``authorize`` refuses;
- an operator retries a dead request and cancels a pending one through the confirmation page,
  with a required note, recorded with the logged-in operator as the actor; the retried turn then
  runs on a worker and commits;
- a viewer sees no form and is refused; a POST without the CSRF token, with another, from
  another origin or without a session is refused; ``authorize`` is asked with the action.

A store without an inbox says so on the page.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from starlette.applications import Starlette
from starlette.routing import Mount

from intention_kernel.contracts import DurabilityStore
from intention_kernel.contracts.errors import ErrorCode, KernelError, UsageError
from intention_kernel.contracts.inbox import InboxRequest, RequestState, TurnInbox
from intention_kernel.http import BearerTokens, Principal
from intention_kernel.http.inspector import create_inspector
from intention_kernel.kernel import define_schedule
from tests.http.support import make_desk

from .harness import SECRET, Live, Turns, navigate
from .test_browser import check_accessible, no_script_ran
from .test_operator_views import parse

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

SECRETS = {
    "alice": "alice-token-0001",  # operator, every thread
    "bob": "bob-token-000002",  # viewer, not the secret-* threads
    "carol": "carol-token-0003",  # operator, not the secret-* threads, may not act on queue-b
}
ROLES = {"alice": ["operator"], "bob": ["viewer"], "carol": ["operator"]}
PAGE_SIZE = 2
TEXT = "Is breakfast included?"
HOSTILE_ERROR = 'refused: <img src=x onerror="window.__xss = 3"> at postgresql://ik:hunter2@db/ik'
LATER = timedelta(days=1)


def authorize(principal: Principal, thread_id: str, action: str) -> bool:
    if principal.id == "alice":
        return True
    if thread_id.startswith("secret"):
        return False
    return not (principal.id == "carol" and thread_id == "queue-b" and action != "read")


class Queued(Live):
    """The inspector alone at ``/inspect`` with ``authorize`` and pages of two, over a store
    whose inbox holds dead, pending and running requests (when the store has an inbox)."""

    inbox: TurnInbox | None
    asked: list[tuple[str, str, str]]
    inbox_role = True
    """``False``: the inspector reads the store as one built without the inbox role."""

    async def _start(self) -> None:
        self.store = await self._open()
        self.desk = make_desk(self.store)
        self.asked = []
        await Turns(self.desk, "queue-a").say(TEXT)
        try:
            found = getattr(self.store, "inbox", None)
        except KernelError:
            found = None
        self.inbox = found if isinstance(found, TurnInbox) and self.inbox_role else None
        if self.inbox is not None:
            await self._seed(self.inbox)

        def asking(principal: Principal, thread_id: str, action: str) -> bool:
            self.asked.append((principal.id, thread_id, action))
            return authorize(principal, thread_id, action)

        inspector = create_inspector(
            self.store if self.inbox_role else cast(DurabilityStore, WithoutInbox(self.store)),
            authenticate=BearerTokens.from_secrets(SECRETS, ROLES),
            agent=self.desk.agent,
            authorize=asking,
            session_secret=SECRET,
            page_size=PAGE_SIZE,
        )
        app = Starlette(routes=[Mount("/inspect", app=inspector)])
        await self._serve(self._config(app))

    def _config(self, app: Starlette) -> Any:
        import uvicorn

        return uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")

    async def _submit(self, thread: str, turn: str, **extra: Any) -> InboxRequest:
        return await self.desk.agent.submit(
            thread_id=thread, turn_id=turn, text=TEXT, host_context={"actor": "t"}, **extra
        )

    async def _dead(self, inbox: TurnInbox, thread: str, turn: str, error: str) -> None:
        await self._submit(thread, turn)
        claimed = await inbox.claim("seed-worker", ttl=60)
        assert claimed is not None and claimed.key == (thread, turn)
        released = await inbox.release(
            "seed-worker",
            thread,
            turn,
            retry_in=None,
            error_code="MODEL_GATEWAY_FAILED",
            error=error,
        )
        assert released is not None and released.state is RequestState.DEAD

    async def _seed(self, inbox: TurnInbox) -> None:
        await self._dead(inbox, "queue-a", "req-dead-retry", "the model provider refused")
        await self._dead(inbox, "queue-a", "req-dead-viewer", HOSTILE_ERROR)
        for n in (1, 2, 3):  # readable and refused dead requests interleaved, for the pager
            await self._dead(inbox, "queue-d", f"page-{n}", "refused")
            await self._dead(inbox, f"secret-{n}", f"req-secret-{n}", "refused")
        await self._submit("queue-b", "req-running")
        claimed = await inbox.claim("worker-7", ttl=3600)
        assert claimed is not None and claimed.key == ("queue-b", "req-running")
        later = datetime.now(UTC) + LATER
        await self._submit("queue-b", "req-pending-cancel", not_before=later)
        await self._submit("queue-c", "req-pending-only", not_before=later)
        await self._schedule()

    async def _schedule(self) -> None:
        """Two schedules as workers register them: one with a last run, one with a hostile
        text and a thread the viewer may not read."""
        rows: Any = getattr(self.store, "schedules")  # noqa: B009 - not on the protocol
        digest = define_schedule(
            "morning-digest",
            cron="0 8 * * 1-5",
            thread_id="queue-a",
            text="Digest",
            timezone="Europe/Lisbon",
            missed="catch_up_one",
        )
        now = datetime.now(UTC)
        await rows.register(digest.id, digest.definition(), now)
        await rows.advance(digest.id, now - timedelta(hours=1))
        hostile = define_schedule(
            "secret-sweep", cron="*/5 * * * *", thread_id="secret-9", text=HOSTILE_ERROR
        )
        await rows.register(hostile.id, hostile.definition(), now)

    def request(self, thread: str, turn: str) -> InboxRequest:
        assert self.inbox is not None
        found = self.call(self.inbox.get(thread, turn))
        assert found is not None
        return found


class WithoutInbox:
    """A store as one built without the inbox role answers (``NOT_SUPPORTED``)."""

    def __init__(self, store: object) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name in ("inbox", "schedules"):
            raise UsageError(f"this store has no {name} storage", code=ErrorCode.NOT_SUPPORTED)
        return getattr(self._store, name)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Queued]:
    running = Queued("sqlite", tmp_path_factory.mktemp("requests-bare"))
    running.inbox_role = False
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def queued(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Queued]:
    running = Queued(request.param, tmp_path_factory.mktemp(f"requests-{request.param}"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def needs_inbox(queued: Queued) -> TurnInbox:
    if queued.inbox is None:
        pytest.skip(f"the {queued.backend} store has no turn inbox")
    return queued.inbox


def login(live: Queued, who: str) -> tuple[httpx.Client, str]:
    client = httpx.Client(base_url=live.url, timeout=30, follow_redirects=False)
    form = parse(client.get("/inspect/login").text)
    answer = client.post(
        "/inspect/login",
        data={"csrf": form.csrf, "next": "/inspect/requests", "token": SECRETS[who]},
    )
    assert answer.status_code == 303, answer.text
    page = client.get("/inspect/requests")
    assert page.status_code == 200, page.text
    return client, parse(page.text).csrf


def log_in_as(driver: WebDriver, live: Queued, who: str, path: str) -> None:
    driver.delete_all_cookies()
    driver.get(live.page(path))
    assert "/login" in driver.current_url
    driver.find_element(By.ID, "token").send_keys(SECRETS[who])
    navigate(driver, driver.find_element(By.CSS_SELECTOR, "main form button[type=submit]").click)
    assert "/login" not in driver.current_url, driver.page_source[:2000]


COLUMNS = ("thread", "turn", "submitted", "attempts", "not_before", "claimed", "error", "operator")


def row_of(driver: WebDriver, section: str, turn: str) -> dict[str, str]:
    """The cells of the row of ``turn`` in the ``section`` (dead, pending, running) table."""
    rows = driver.find_elements(By.CSS_SELECTOR, f"section[aria-labelledby='{section}-h'] tbody tr")
    for row in rows:
        if row.find_element(By.CSS_SELECTOR, "th").text == turn:
            cells = [c.text for c in row.find_elements(By.CSS_SELECTOR, "th, td")]
            return dict(zip(COLUMNS, cells, strict=True))
    raise AssertionError(f"{turn} is not among the {section} requests")


def form(csrf: str, thread: str, turn: str, action: str, note: str = "checked", **more: str) -> Any:
    return {"csrf": csrf, "thread": thread, "turn": turn, "action": action, "note": note, **more}


def readable_dead(live: Queued, who: str) -> list[str]:
    """Turn ids of the dead requests ``who`` may read, in submission order."""
    inbox = needs_inbox(live)
    found = live.call(inbox.list_requests(state=RequestState.DEAD, limit=1000))
    return [r.turn_id for r in found if authorize(Principal(who), r.thread_id, "read")]


# ---------------------------------------------------------------- listing


def test_the_requests_page_lists_dead_pending_and_running(
    queued: Queued, browser: WebDriver
) -> None:
    needs_inbox(queued)
    log_in_as(browser, queued, "alice", "/requests")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Turn requests"
    check_accessible(browser)
    current = browser.find_element(By.CSS_SELECTOR, "nav[aria-label=Inspector] [aria-current]")
    assert current.text == "Requests"
    dead = row_of(browser, "dead", "req-dead-retry")
    assert dead["thread"] == "queue-a" and dead["submitted"].endswith(" ago")
    assert dead["attempts"] == "1" and dead["claimed"] == "-" and dead["operator"] == "-"
    assert dead["error"] == "MODEL_GATEWAY_FAILED the model provider refused"
    running = row_of(browser, "running", "req-running")
    assert running["thread"] == "queue-b" and running["claimed"].startswith("worker-7 until ")
    assert running["attempts"] == "1"
    pending = row_of(browser, "pending", "req-pending-cancel")
    later = queued.request("queue-b", "req-pending-cancel").not_before
    assert pending["not_before"] == f"waits until {later.isoformat(timespec='seconds')}"
    assert pending["attempts"] == "0"
    # Pages of two: the overview shows the oldest two dead ones and links to the rest.
    more = browser.find_element(By.LINK_TEXT, "More dead requests")
    navigate(browser, more.click)
    assert "state=dead" in browser.current_url
    check_accessible(browser)


def test_a_state_pages_only_through_readable_requests(queued: Queued, browser: WebDriver) -> None:
    needs_inbox(queued)
    for who in ("bob", "alice"):
        log_in_as(browser, queued, who, "/requests?state=dead")
        seen: list[str] = []
        while True:
            shown = [
                e.text for e in browser.find_elements(By.CSS_SELECTOR, "main tbody th[scope=row]")
            ]
            assert 0 < len(shown) <= PAGE_SIZE, (who, seen)
            seen += shown
            nexts = browser.find_elements(By.LINK_TEXT, "Next page")
            if not nexts:
                break
            navigate(browser, nexts[0].click)
        assert seen == readable_dead(queued, who), who
        assert (who == "alice") == any(t.startswith("req-secret") for t in seen)
        navigate(browser, browser.find_element(By.LINK_TEXT, "First page").click)
        assert "after=" not in browser.current_url


def test_a_viewer_sees_no_refused_thread_and_stored_text_is_text(
    queued: Queued, browser: WebDriver
) -> None:
    needs_inbox(queued)
    client, _ = login(queued, "bob")
    with closing(client):
        for path in ("/inspect/requests", "/inspect/requests?state=dead"):
            page = client.get(path)
            assert page.status_code == 200 and "secret" not in page.text
        refused = client.get(
            "/inspect/request", params={"thread": "secret-1", "turn": "req-secret-1"}
        )
        assert refused.status_code == 403 and "FORBIDDEN" in refused.text
        assert client.get("/inspect/requests", params={"thread": "secret-1"}).status_code == 403
    log_in_as(browser, queued, "bob", "/requests")
    row = row_of(browser, "dead", "req-dead-viewer")["error"]
    assert 'refused: <img src=x onerror="window.__xss = 3">' in row
    assert "hunter2" not in row and "postgresql://ik:***@db/ik" in row  # redacted
    assert browser.find_elements(By.CSS_SELECTOR, "main img") == []
    no_script_ran(browser)
    navigate(browser, browser.find_element(By.LINK_TEXT, "req-dead-viewer").click)
    assert browser.find_elements(By.ID, "request-form") == []
    main = browser.find_element(By.TAG_NAME, "main").text
    assert "Only an operator may retry or cancel this request." in main
    check_accessible(browser)


def test_a_threads_page_shows_its_requests(queued: Queued, browser: WebDriver) -> None:
    needs_inbox(queued)
    log_in_as(browser, queued, "alice", "/thread?id=queue-a")
    section = browser.find_element(By.ID, "requests").text
    assert "req-dead-viewer" in section and "MODEL_GATEWAY_FAILED" in section
    check_accessible(browser)
    navigate(browser, browser.find_element(By.LINK_TEXT, "The thread's requests").click)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Turn requests of queue-a"
    assert "req-running" not in browser.find_element(By.TAG_NAME, "main").text
    # A thread whose only request has not run yet opens too (no checkpoint, no receipt).
    browser.get(queued.page("/thread?id=queue-c"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "Thread queue-c"
    assert "req-pending-only" in browser.find_element(By.ID, "requests").text
    navigate(browser, browser.find_element(By.LINK_TEXT, "req-pending-only").click)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Request req-pending-only"
    assert browser.find_element(By.ID, "state").text == "pending"


# ---------------------------------------------------------------- acting


def test_an_operator_retries_a_dead_request_and_its_turn_commits(
    queued: Queued, browser: WebDriver
) -> None:
    inbox = needs_inbox(queued)
    log_in_as(browser, queued, "alice", "/requests")
    navigate(browser, browser.find_element(By.LINK_TEXT, "req-dead-retry").click)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Request req-dead-retry"
    check_accessible(browser)
    assert browser.find_elements(By.ID, "action-cancel") == []  # a dead request is not cancelled
    browser.find_element(By.ID, "action-retry").click()
    browser.find_element(By.ID, "note").send_keys("the provider's outage is over")
    navigate(browser, browser.find_element(By.XPATH, "//button[text()='Review the action']").click)
    record = browser.find_element(By.ID, "record").text
    assert "retry" in record and "alice" in record and "the provider's outage is over" in record
    assert queued.request("queue-a", "req-dead-retry").state is RequestState.DEAD  # not yet
    navigate(browser, browser.find_element(By.XPATH, "//button[text()='Record this action']").click)
    assert "Recorded" in browser.find_element(By.CSS_SELECTOR, "[role=status]").text
    assert browser.find_element(By.ID, "state").text == "pending"
    log = browser.find_element(By.ID, "log-h").find_element(By.XPATH, "..").text
    assert "alice retry dead the provider's outage is over" in log
    retried = queued.request("queue-a", "req-dead-retry")
    assert retried.state is RequestState.PENDING
    [entry] = retried.operator_log
    assert (entry.action, entry.actor, entry.note) == (
        "retry",
        "alice",
        "the provider's outage is over",
    )
    assert entry.previous_state is RequestState.DEAD

    async def state() -> RequestState | None:
        found = await inbox.get("queue-a", "req-dead-retry")
        return None if found is None else found.state

    async def work() -> None:
        worker = queued.desk.agent.worker(poll_interval=0.05, claim_ttl=5.0)
        task = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(20):
                while await state() is not RequestState.DONE:  # noqa: ASYNC110 - polls the store
                    await asyncio.sleep(0.02)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 20)

    queued.call(work())
    stored = queued.call(queued.store.get_turn("queue-a", "req-dead-retry"))
    assert stored is not None and "Breakfast is included" in json.dumps(stored.response)


def test_an_operator_cancels_a_pending_request(queued: Queued) -> None:
    needs_inbox(queued)
    client, csrf = login(queued, "alice")
    with closing(client):
        chosen = form(csrf, "queue-b", "req-pending-cancel", "cancel", "the user withdrew it")
        shown = client.post("/inspect/request/confirm", data=chosen)
        assert shown.status_code == 200 and "Record this action" in shown.text
        assert queued.request("queue-b", "req-pending-cancel").state is RequestState.PENDING
        done = client.post("/inspect/request", data={**chosen, "confirmed": "1"})
        assert done.status_code == 303 and "recorded=1" in done.headers["location"]
        page = client.get(done.headers["location"])
        assert "Recorded" in page.text and "No operator has acted" not in page.text
    cancelled = queued.request("queue-b", "req-pending-cancel")
    assert cancelled.state is RequestState.DEAD
    assert [(e.action, e.actor, e.note) for e in cancelled.operator_log] == [
        ("cancel", "alice", "the user withdrew it")
    ]


def test_a_note_a_confirmation_and_an_allowed_state_are_required(queued: Queued) -> None:
    needs_inbox(queued)
    client, csrf = login(queued, "alice")
    with closing(client):
        for data, status, code in [
            (form(csrf, "queue-a", "req-dead-viewer", "retry", note="  "), 422, "NOTE_REQUIRED"),
            (form(csrf, "queue-a", "req-dead-viewer", "dance"), 422, "ACTION_REQUIRED"),
            (form(csrf, "queue-a", "req-dead-viewer", "cancel"), 409, "REQUEST_STATE_CONFLICT"),
            (form(csrf, "queue-b", "req-running", "retry"), 409, "REQUEST_STATE_CONFLICT"),
            (form(csrf, "queue-a", "nope", "retry"), 404, "REQUEST_NOT_FOUND"),
        ]:
            answer = client.post("/inspect/request/confirm", data=data)
            assert answer.status_code == status and code in answer.text, (data, answer.text)
        blank = form(csrf, "queue-a", "req-dead-viewer", "retry", note="", confirmed="1")
        answer = client.post("/inspect/request", data=blank)
        assert answer.status_code == 422 and "NOTE_REQUIRED" in answer.text
        unconfirmed = form(csrf, "queue-a", "req-dead-viewer", "retry")
        answer = client.post("/inspect/request", data=unconfirmed)
        assert answer.status_code == 422 and "NOT_CONFIRMED" in answer.text
        # The store refuses what the state does not allow, whatever the form says.
        cancel = form(csrf, "queue-a", "req-dead-viewer", "cancel", confirmed="1")
        answer = client.post("/inspect/request", data=cancel)
        assert answer.status_code == 409 and "REQUEST_STATE_CONFLICT" in answer.text
    untouched = queued.request("queue-a", "req-dead-viewer")
    assert untouched.state is RequestState.DEAD and untouched.operator_log == ()


def test_viewers_forged_forms_and_refused_actions_change_nothing(queued: Queued) -> None:
    needs_inbox(queued)
    retry = form("", "queue-a", "req-dead-viewer", "retry", confirmed="1")
    with httpx.Client(base_url=queued.url, timeout=30, follow_redirects=False) as anonymous:
        answer = anonymous.post("/inspect/request", data=retry)
        assert answer.status_code == 401 and "UNAUTHENTICATED" in answer.text
    bob, bob_csrf = login(queued, "bob")
    alice, alice_csrf = login(queued, "alice")
    carol, carol_csrf = login(queued, "carol")
    with closing(bob), closing(alice), closing(carol):
        for path in ("/inspect/request/confirm", "/inspect/request"):
            viewer = bob.post(path, data={**retry, "csrf": bob_csrf})
            assert viewer.status_code == 403 and "is a viewer" in viewer.text
            for token in ("", "forged"):
                forged = alice.post(path, data={**retry, "csrf": token})
                assert forged.status_code == 403 and "CSRF_REJECTED" in forged.text
            other = alice.post(
                path,
                data={**retry, "csrf": alice_csrf},
                headers={"Origin": "http://evil.example"},
            )
            assert other.status_code == 403 and "CROSS_ORIGIN" in other.text
            # carol is an operator, but authorize refuses her any action on queue-b's requests
            refused = carol.post(
                path, data=form(carol_csrf, "queue-b", "req-running", "retry", confirmed="1")
            )
            assert refused.status_code == 403 and "carol may not retry" in refused.text
            secret = carol.post(
                path,
                data=form(carol_csrf, "secret-1", "req-secret-1", "retry", confirmed="1"),
            )
            assert secret.status_code == 403 and "FORBIDDEN" in secret.text
        page = carol.get("/inspect/request", params={"thread": "queue-b", "turn": "req-running"})
        assert page.status_code == 200 and "request-form" not in page.text
    assert ("carol", "queue-b", "retry") in queued.asked
    assert ("carol", "secret-1", "retry") in queued.asked
    untouched = queued.request("queue-a", "req-dead-viewer")
    assert untouched.state is RequestState.DEAD and untouched.operator_log == ()
    assert queued.request("secret-1", "req-secret-1").state is RequestState.DEAD


# ---------------------------------------------------------------- no inbox


def test_a_store_without_an_inbox_says_so(bare: Queued) -> None:
    client, _ = login(bare, "alice")
    with closing(client):
        page = client.get("/inspect/requests")
        assert "This store keeps no turn inbox" in page.text
        one = client.get("/inspect/request", params={"thread": "queue-a", "turn": "x"})
        assert one.status_code == 501 and "NO_INBOX" in one.text
        thread = client.get("/inspect/thread", params={"id": "queue-a"})
        assert thread.status_code == 200 and "Turn requests" not in thread.text


def test_screenshot_of_the_requests_page(
    queued: Queued, browser: WebDriver, tmp_path: Path
) -> None:
    """``IK_SCREENSHOTS=docs/images`` writes ``inspector-requests.png`` for the docs."""
    needs_inbox(queued)
    target = Path(os.environ.get("IK_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    browser.set_window_size(1280, 800)
    width, height = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(1280 + 1280 - width, 800 + 800 - height)
    log_in_as(browser, queued, "bob", "/requests")
    assert browser.save_screenshot(str(target / "inspector-requests.png"))


# ---------------------------------------------------------------- schedules


def schedule_rows(driver: WebDriver) -> dict[str, list[str]]:
    rows = driver.find_elements(By.CSS_SELECTOR, "#schedules tbody tr")
    return {
        row.find_element(By.TAG_NAME, "th").text: [
            c.text for c in row.find_elements(By.TAG_NAME, "td")
        ]
        for row in rows
    }


def test_the_schedules_page_lists_each_schedule_with_its_runs(
    queued: Queued, browser: WebDriver
) -> None:
    needs_inbox(queued)
    log_in_as(browser, queued, "bob", "/schedules")  # a viewer reads it
    assert browser.find_element(By.TAG_NAME, "h1").text == "Schedules"
    check_accessible(browser)
    no_script_ran(browser)
    current = browser.find_element(By.CSS_SELECTOR, "nav[aria-label=Inspector] [aria-current]")
    assert current.text == "Schedules"
    found = schedule_rows(browser)
    thread, cron, zone, missed, last, upcoming, registered = found["morning-digest"]
    assert (thread, cron, zone, missed) == (
        "queue-a",
        "0 8 * * 1-5",
        "Europe/Lisbon",
        "catch_up_one",
    )
    assert last != "never" and upcoming != "-" and registered
    assert "secret-sweep" not in found  # its thread is not the viewer's to read
    link = browser.find_element(By.LINK_TEXT, "queue-a")
    assert str(link.get_attribute("href")).endswith("/inspect/thread?id=queue-a")


def test_an_operator_sees_every_schedule(queued: Queued, browser: WebDriver) -> None:
    needs_inbox(queued)
    log_in_as(browser, queued, "alice", "/schedules")
    found = schedule_rows(browser)
    assert sorted(found) == ["morning-digest", "secret-sweep"]
    assert found["secret-sweep"][4] == "never"
    no_script_ran(browser)


def test_a_store_without_schedules_says_so(bare: Queued, browser: WebDriver) -> None:
    log_in_as(browser, bare, "alice", "/schedules")
    assert "This store keeps no schedules." in browser.find_element(By.TAG_NAME, "main").text
    check_accessible(browser)
