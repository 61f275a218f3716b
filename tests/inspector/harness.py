"""The HTTP service with the inspector on a real uvicorn server in a thread of its own, on a
SQLite or PostgreSQL store seeded by real turns of the travel desk; a headless Chromium.

Why a thread: the browser is driven by blocking calls, so the server (and the store, bound to
its event loop) runs on another loop; ``call`` runs a coroutine there.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

from intention_kernel.contracts import DurabilityStore
from intention_kernel.contracts.receipts import EffectAuthority, EffectReceipt, ReceiptStatus
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.http import BearerTokens, create_app, server_config
from intention_kernel.kernel import provider_idempotency_key
from tests.http.support import TOKENS, Desk, QuietServer, make_desk

T = TypeVar("T")

ROLES = {"alice": ["operator"], "bob": ["viewer"]}
SECRET = "inspector-test-session-secret-0123456789"
HOSTILE = (
    '<script>window.__xss = 1; alert(1)</script> and "><img src=x onerror=alert(1)>'
    ' and <img src=x onerror="window.__xss = 2">'
)
GUESTS = 55
"""More threads than a page (50) holds."""


def provider_key(receipt: EffectReceipt) -> str:
    """The key the travel desk sends the hotel provider (tenant ``demo``)."""
    return provider_idempotency_key(
        EffectAuthority(receipt.idempotency_key, receipt.id),
        tenant="demo",
        thread=receipt.thread_id,
    )


@dataclass
class Seeded:
    lost: list[str] = field(default_factory=list)
    """Threads with an uncertain booking (the provider applied it, the answer was lost)."""
    pending: str = "traveller-pending"
    booked: str = "traveller-booked"
    hostile: str = "hostile-text"


class Turns:
    """Real turns of one thread, numbered."""

    def __init__(self, desk: Desk, thread: str) -> None:
        self.desk = desk
        self.thread = thread
        self.count = 0

    async def say(self, text: str, selection: dict[str, Any] | None = None) -> Any:
        self.count += 1
        return await self.desk.agent.run(
            thread_id=self.thread,
            turn_id=f"turn-{self.count}",
            text=text,
            selection=selection,
            host_context={"actor": "traveller"},
        )

    async def to_confirmation(self) -> Any:
        await self.say("Find a hotel in Lisbon for 2 nights")
        await self.say("How much is Alfama Inn?")
        proposed = await self.say("Book it")
        interaction = proposed.checkpoint.interaction
        assert interaction is not None
        return interaction

    async def accept(self, interaction: Any) -> Any:
        return await self.say("", {"interaction_id": interaction.id, "option": "yes"})


async def seed(desk: Desk) -> Seeded:
    seeded = Seeded()
    for n in range(GUESTS):
        await Turns(desk, f"guest-{n:03d}").say("Is breakfast included?")
    await Turns(desk, seeded.hostile).say(HOSTILE)
    booked = Turns(desk, seeded.booked)
    await booked.accept(await booked.to_confirmation())
    await Turns(desk, seeded.pending).to_confirmation()
    for thread in ("traveller-lost-1", "traveller-lost-2"):
        lost = Turns(desk, thread)
        interaction = await lost.to_confirmation()
        desk.provider.lose_next_response = True
        answer = await lost.accept(interaction)
        assert "being verified" in answer.response.text
        seeded.lost.append(thread)
    return seeded


class Live:
    """The service with the inspector at ``/inspect``, served from a thread."""

    def __init__(self, backend: str, directory: Path) -> None:
        self.backend = backend
        self.directory = directory
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = ""
        self.store: DurabilityStore
        self.desk: Desk
        self.seeded: Seeded
        self._server: QuietServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._cleanup: list[Callable[[], Awaitable[None]]] = []

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout)

    async def _open(self) -> DurabilityStore:
        if self.backend == "sqlite":
            store = await SQLiteDurability.open(self.directory / "inspector.db")
            self._cleanup.append(store.close)
            return store
        from intention_kernel.durability.postgres import PostgresDurability
        from tests.support.postgres import drop_schema, require_postgres, scratch_schema

        dsn = await asyncio.to_thread(require_postgres)  # fails under CI=true when missing
        schema = scratch_schema("ik_inspector")
        opened = await PostgresDurability.open(dsn, schema=schema, setup=True, max_size=6)
        self._cleanup.append(lambda: drop_schema(dsn, schema))
        self._cleanup.append(opened.close)
        return opened

    async def _start(self) -> None:
        self.store = await self._open()
        self.desk = make_desk(self.store)
        self.seeded = await seed(self.desk)
        app = create_app(  # the provider's key comes from the agent, as under ``serve``
            self.desk.agent,
            authenticate=BearerTokens.from_secrets(TOKENS, ROLES),
            inspector=True,
            session_secret=SECRET,
        )
        await self._serve(server_config(app, host="127.0.0.1", port=0, log_level="warning"))

    async def _serve(self, config: uvicorn.Config) -> None:
        server = QuietServer(config)
        self._server = server
        self._task = asyncio.create_task(server.serve())
        while not server.started:
            if self._task.done():
                self._task.result()
                raise AssertionError("the server stopped before it started")
            await asyncio.sleep(0.01)
        self.url = f"http://127.0.0.1:{server.port}"

    async def _stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await asyncio.wait_for(self._task, 60)
        for step in reversed(self._cleanup):
            await step()

    def start(self) -> Live:
        self.call(self._start(), timeout=600)
        return self

    def stop(self) -> None:
        try:
            self.call(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()

    def uncertain(self, thread: str) -> EffectReceipt:
        [receipt] = self.call(
            self.store.list_receipts(thread_id=thread, status=ReceiptStatus.UNCERTAIN)
        )
        return receipt

    def page(self, path: str) -> str:
        return f"{self.url}/inspect{path}"


def chromium() -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,800",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=ChromeService("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    return driver


def log_in(driver: WebDriver, live: Live, who: str, path: str = "/threads") -> None:
    driver.delete_all_cookies()
    driver.get(live.page(path))
    assert "/login" in driver.current_url
    driver.find_element(By.ID, "token").send_keys(TOKENS[who])
    navigate(driver, driver.find_element(By.CSS_SELECTOR, "main form button[type=submit]").click)
    assert "/login" not in driver.current_url, driver.page_source[:2000]


def navigate(driver: WebDriver, action: Callable[[], object]) -> None:
    """Do ``action`` (a click, a key) and wait until the next page has replaced this one.

    Why a marker on ``window`` rather than a stale element: while a document is being replaced,
    chromedriver may answer a question about the old element with a generic error ("Node with
    given id does not belong to the document") instead of "stale"; a new document simply lacks
    the marker, and a question asked mid-replacement is asked again.
    """
    marker = secrets.token_hex(8)
    driver.execute_script("window.__page = arguments[0]", marker)
    action()

    def arrived(d: WebDriver) -> bool:
        try:
            return bool(
                d.execute_script(
                    "return window.__page !== arguments[0] && document.readyState === 'complete'",
                    marker,
                )
            )
        except WebDriverException:  # the old document is going away: ask again
            return False

    WebDriverWait(driver, 20).until(arrived)


def session_client(live: Live, who: str) -> tuple[httpx.Client, str]:
    """An HTTP client logged in through the login form, and its session's CSRF token."""
    client = httpx.Client(base_url=live.url, timeout=30, follow_redirects=False)
    page = client.get("/inspect/login")
    token = _csrf(page.text)
    answer = client.post(
        "/inspect/login",
        data={"csrf": token, "next": "/inspect/threads", "token": TOKENS[who]},
    )
    assert answer.status_code == 303, answer.text
    threads = client.get("/inspect/threads")
    assert threads.status_code == 200
    return client, _csrf(threads.text)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html[:2000]
    return found.group(1)
