"""Budgets in the inspector, through a real server on loopback and a headless Chromium:

- the budgets page lists budget lines (used, reserved, limit, remaining, window end, the
  operator's limit), filtered by budget and to the exhausted ones, in pages, and the providers'
  slots and cool-downs;
- an operator raises an exhausted line's limit through the confirmation page, recorded with the
  logged-in operator as the actor, and the agent's next turn is no longer refused;
- a viewer sees no form and is refused; a POST without the CSRF token, with another, from
  another origin or without a session is refused; bad input is shown and changes nothing.

A store without budget counters says so on the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any, cast

import httpx
import pytest
from pydantic import JsonValue
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from starlette.applications import Starlette
from starlette.routing import Mount

from intention_kernel.contracts import DurabilityStore, ModelRequest, ModelResponse
from intention_kernel.contracts.errors import ErrorCode, UsageError
from intention_kernel.contracts.flow import BudgetLine, BudgetUsage, FlowCounters
from intention_kernel.http import BearerTokens
from intention_kernel.http.inspector import create_inspector
from intention_kernel.kernel import Budget, Kernel
from intention_kernel.testing import ScriptedModelGateway
from tests.kernel.support import Shop, cite_all, support_agent

from .harness import SECRET, Live, navigate
from .test_browser import check_accessible, no_script_ran
from .test_operator_views import parse

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

SECRETS = {"alice": "alice-token-0001", "bob": "bob-token-000002"}
ROLES = {"alice": ["operator"], "bob": ["viewer"]}
PAGE_SIZE = 2
TENANTS = ("acme-0", "acme-1", "acme-2", "acme-3", "acme-4")
HOSTILE_NOTE = '<img src=x onerror="window.__xss = 4"> raised'


class Metered:
    """A model that reports 50 + 20 tokens a call, as a provider's usage."""

    provider = "openai"
    max_tokens = 100

    def __init__(self) -> None:
        self.calls = 0
        self.inner = ScriptedModelGateway({"interpret": self._interpret, "compose": cite_all})

    @staticmethod
    def _interpret(request: ModelRequest) -> JsonValue:
        lookup: JsonValue = {"capability": "orders.lookup", "input": {"order_id": "42"}}
        return {"intentions": [lookup], "answer": None, "reply": None}

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        answer = await self.inner.complete(request)
        return answer.model_copy(update={"usage": {"input_tokens": 50, "output_tokens": 20}})


class Budgeted(Live):
    """The inspector alone at ``/inspect`` in pages of two, over a store whose ``daily``
    budget the agent has used up, with ``tenant.day`` lines for five tenants (one exhausted)
    and a provider cooling down."""

    counters_role = True
    model: Metered
    agent: Any
    turns = 0

    async def _start(self) -> None:
        self.store = await self._open()
        self.model = Metered()
        wired = Kernel(
            durability=self.store,
            model=self.model,
            ports={"shop": Shop()},
            budgets=[Budget(tokens=140, name="daily")],
        )
        self.agent = wired.compile(support_agent())
        if self.counters_role:
            assert (await self.turn()).response.kind != "budget_exceeded"
            assert (await self.turn()).response.kind == "budget_exceeded"
            counters: FlowCounters = cast(Any, self.store).counters
            for n, key in enumerate(TENANTS):
                line = BudgetLine("tenant.day", key, "day", 1000, None)
                reserved = (await counters.reserve(line, 100, 0.0)).reservation
                assert reserved is not None
                await counters.settle(reserved.id, 1000 if n == 3 else 100 * n, 0.0)
            await counters.cool_down("anthropic", 3600)
        served = self.store if self.counters_role else WithoutCounters(self.store)
        inspector = create_inspector(
            cast(DurabilityStore, served),
            authenticate=BearerTokens.from_secrets(SECRETS, ROLES),
            agent=self.agent,
            session_secret=SECRET,
            page_size=PAGE_SIZE,
        )
        import uvicorn

        app = Starlette(routes=[Mount("/inspect", app=inspector)])
        await self._serve(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))

    async def turn(self) -> Any:
        self.turns += 1
        return await self.agent.run(thread_id="t1", turn_id=f"u{self.turns}", text="where is 42")

    def line(self, budget: str, key: str) -> BudgetUsage:
        counters: FlowCounters = cast(Any, self.store).counters
        [found] = self.call(counters.usage(budget=budget, key=key, limit=1))
        return found


class WithoutCounters:
    """A store as one built without the flow role answers (``NOT_SUPPORTED``)."""

    def __init__(self, store: object) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name == "counters":
            raise UsageError("this store has no flow storage", code=ErrorCode.NOT_SUPPORTED)
        return getattr(self._store, name)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def budgeted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Budgeted]:
    running = Budgeted(request.param, tmp_path_factory.mktemp(f"budgets-{request.param}"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Budgeted]:
    running = Budgeted("sqlite", tmp_path_factory.mktemp("budgets-bare"))
    running.counters_role = False
    running.start()
    try:
        yield running
    finally:
        running.stop()


def login(live: Live, who: str) -> tuple[httpx.Client, str]:
    client = httpx.Client(base_url=live.url, timeout=30, follow_redirects=False)
    form = parse(client.get("/inspect/login").text)
    answer = client.post(
        "/inspect/login",
        data={"csrf": form.csrf, "next": "/inspect/budgets", "token": SECRETS[who]},
    )
    assert answer.status_code == 303, answer.text
    page = client.get("/inspect/budgets")
    assert page.status_code == 200, page.text
    return client, parse(page.text).csrf


def log_in_as(driver: WebDriver, live: Live, who: str, path: str) -> None:
    driver.delete_all_cookies()
    driver.get(live.page(path))
    assert "/login" in driver.current_url
    driver.find_element(By.ID, "token").send_keys(SECRETS[who])
    navigate(driver, driver.find_element(By.CSS_SELECTOR, "main form button[type=submit]").click)
    assert "/login" not in driver.current_url, driver.page_source[:2000]


COLUMNS = ("budget", "key", "window", "used", "reserved", "limit", "remaining", "ends", "state")


def rows(driver: WebDriver) -> dict[str, dict[str, str]]:
    """The budget lines shown, by key."""
    found = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "#lines tbody tr"):
        cells = [c.text for c in row.find_elements(By.CSS_SELECTOR, "th, td")]
        shown = dict(zip(COLUMNS, cells, strict=True))
        found[shown["key"]] = shown
    return found


def limit_form(csrf: str, key: str = "acme-1", **fields: str) -> dict[str, str]:
    return {"csrf": csrf, "budget": "tenant.day", "key": key, "note": "checked", **fields}


# ---------------------------------------------------------------- listing


def test_the_budgets_page_filters_pages_and_shows_providers(
    budgeted: Budgeted, browser: WebDriver
) -> None:
    log_in_as(browser, budgeted, "bob", "/budgets?budget=tenant.day")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Budgets"
    check_accessible(browser)
    current = browser.find_element(By.CSS_SELECTOR, "nav[aria-label=Inspector] [aria-current]")
    assert current.text == "Budgets"
    seen: dict[str, dict[str, str]] = {}
    while True:
        shown = rows(browser)
        assert 0 < len(shown) <= PAGE_SIZE
        assert all(r["budget"] == "tenant.day" for r in shown.values())
        seen.update(shown)
        nexts = browser.find_elements(By.LINK_TEXT, "Next page")
        if not nexts:
            break
        navigate(browser, nexts[0].click)
    assert sorted(seen) == list(TENANTS)
    assert seen["acme-2"]["used"] == "200" and seen["acme-2"]["remaining"] == "800"
    assert seen["acme-2"]["reserved"] == "0" and seen["acme-2"]["limit"] == "1000"
    assert seen["acme-2"]["window"] == "day" and seen["acme-2"]["state"] == "open"
    assert seen["acme-3"]["state"] == "exhausted" and seen["acme-3"]["remaining"] == "0"
    providers = browser.find_element(By.ID, "providers").text
    assert "anthropic" in providers
    # Only the exhausted lines, of every budget: the agent's and acme-3.
    browser.find_element(By.ID, "budget").clear()
    browser.find_element(By.ID, "f-exhausted").click()
    navigate(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button").click)
    assert "exhausted=1" in browser.current_url
    exhausted = rows(browser)
    assert set(exhausted) == {"acme-3", "support"}
    assert exhausted["support"]["budget"] == "daily"
    assert all(r["state"] == "exhausted" for r in exhausted.values())
    check_accessible(browser)


def test_a_store_without_counters_says_so(bare: Budgeted) -> None:
    client, csrf = login(bare, "alice")
    with closing(client):
        page = client.get("/inspect/budgets")
        assert "This store keeps no budget counters" in page.text
        one = client.get("/inspect/budget", params={"budget": "daily", "key": "support"})
        assert one.status_code == 501 and "NO_COUNTERS" in one.text
        posted = client.post("/inspect/budget", data={**limit_form(csrf), "tokens": "5"})
        assert posted.status_code == 501 and "NO_COUNTERS" in posted.text


# ---------------------------------------------------------------- acting


def test_an_operator_raises_an_exhausted_limit_and_the_next_turn_runs(
    budgeted: Budgeted, browser: WebDriver
) -> None:
    refused = budgeted.call(budgeted.turn())
    assert refused.response.kind == "budget_exceeded"
    calls = budgeted.model.calls
    log_in_as(browser, budgeted, "alice", "/budgets?exhausted=1")
    navigate(browser, browser.find_element(By.LINK_TEXT, "support").click)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Budget daily for support"
    check_accessible(browser)
    assert browser.find_element(By.ID, "state").text == "exhausted"
    assert browser.find_element(By.ID, "remaining").text == "0"
    browser.find_element(By.ID, "tokens").send_keys("100000")
    browser.find_element(By.ID, "note").send_keys("support week: " + HOSTILE_NOTE)
    navigate(browser, browser.find_element(By.XPATH, "//button[text()='Review the limit']").click)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Confirm the limit"
    record = browser.find_element(By.ID, "record").text
    assert "100000" in record and "alice" in record and HOSTILE_NOTE in record
    assert budgeted.line("daily", "support").tokens_limit == 140  # not yet
    navigate(browser, browser.find_element(By.XPATH, "//button[text()='Record this limit']").click)
    assert "Recorded" in browser.find_element(By.CSS_SELECTOR, "[role=status]").text
    assert browser.find_element(By.ID, "state").text == "open"
    assert "(set by an operator)" in browser.find_element(By.ID, "limit").text
    override = browser.find_element(By.ID, "override").text
    assert "set by alice" in override and HOSTILE_NOTE in override
    assert browser.find_elements(By.CSS_SELECTOR, "main img") == []
    no_script_ran(browser)
    line = budgeted.line("daily", "support")
    assert (line.tokens_limit, line.overridden, line.exhausted) == (100_000, True, False)
    counters: FlowCounters = cast(Any, budgeted.store).counters
    [stored] = budgeted.call(counters.limits(budget="daily"))
    assert (stored.key, stored.actor, stored.tokens) == ("support", "alice", 100_000)
    assert stored.cost is None
    assert stored.note == "support week: " + HOSTILE_NOTE
    later = budgeted.call(budgeted.turn())
    assert later.response.kind != "budget_exceeded" and budgeted.model.calls == calls + 2


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"tokens": "-5"}, "INVALID_TOKENS"),
        ({"tokens": "lots"}, "INVALID_TOKENS"),
        ({"tokens": "0"}, "INVALID_TOKENS"),
        ({"tokens": "1.5"}, "INVALID_TOKENS"),
        ({"cost": "-1"}, "INVALID_COST"),
        ({"cost": "ten"}, "INVALID_COST"),
        ({"cost": "nan"}, "INVALID_COST"),
        ({"cost": "inf"}, "INVALID_COST"),
        ({}, "LIMIT_REQUIRED"),
        ({"tokens": "5000", "note": "  "}, "NOTE_REQUIRED"),
    ],
)
def test_bad_input_is_shown_and_changes_nothing(
    budgeted: Budgeted, fields: dict[str, str], code: str
) -> None:
    client, csrf = login(budgeted, "alice")
    with closing(client):
        for path in ("/inspect/budget/confirm", "/inspect/budget"):
            answer = client.post(path, data={**limit_form(csrf), "confirmed": "1", **fields})
            assert answer.status_code == 422 and code in answer.text, answer.text
            assert 'role="alert"' in answer.text
        unconfirmed = client.post("/inspect/budget", data={**limit_form(csrf), "tokens": "5000"})
        assert unconfirmed.status_code == 422 and "NOT_CONFIRMED" in unconfirmed.text
    line = budgeted.line("tenant.day", "acme-1")
    assert (line.tokens_limit, line.overridden) == (1000, False)


def test_a_bad_limit_in_the_browser_says_why(budgeted: Budgeted, browser: WebDriver) -> None:
    log_in_as(browser, budgeted, "alice", "/budget?budget=tenant.day&key=acme-3")
    browser.find_element(By.ID, "tokens").send_keys("-100")
    browser.find_element(By.ID, "note").send_keys("more")
    navigate(browser, browser.find_element(By.XPATH, "//button[text()='Review the limit']").click)
    alert = browser.find_element(By.CSS_SELECTOR, "[role=alert]").text
    assert "INVALID_TOKENS" in alert and "whole number" in alert
    assert browser.find_element(By.ID, "tokens").get_attribute("value") == "-100"
    check_accessible(browser)
    assert budgeted.line("tenant.day", "acme-3").exhausted


def test_viewers_forged_forms_and_other_origins_change_nothing(
    budgeted: Budgeted, browser: WebDriver
) -> None:
    log_in_as(browser, budgeted, "bob", "/budget?budget=tenant.day&key=acme-3")
    assert browser.find_elements(By.ID, "limit-form") == []
    main = browser.find_element(By.TAG_NAME, "main").text
    assert "Only an operator may set a budget's limit." in main
    check_accessible(browser)
    raise_it = {"tokens": "999999", "confirmed": "1"}
    with httpx.Client(base_url=budgeted.url, timeout=30, follow_redirects=False) as anonymous:
        answer = anonymous.post("/inspect/budget", data={**limit_form(""), **raise_it})
        assert answer.status_code == 401 and "UNAUTHENTICATED" in answer.text
    bob, bob_csrf = login(budgeted, "bob")
    alice, alice_csrf = login(budgeted, "alice")
    with closing(bob), closing(alice):
        for path in ("/inspect/budget/confirm", "/inspect/budget"):
            viewer = bob.post(path, data={**limit_form(bob_csrf, "acme-3"), **raise_it})
            assert viewer.status_code == 403 and "is a viewer" in viewer.text
            for token in ("", "forged", bob_csrf):
                forged = alice.post(path, data={**limit_form(token, "acme-3"), **raise_it})
                assert forged.status_code == 403 and "CSRF_REJECTED" in forged.text
            other = alice.post(
                path,
                data={**limit_form(alice_csrf, "acme-3"), **raise_it},
                headers={"Origin": "http://evil.example"},
            )
            assert other.status_code == 403 and "CROSS_ORIGIN" in other.text
        missing = alice.post(
            "/inspect/budget/confirm", data={**limit_form(alice_csrf, "nobody"), **raise_it}
        )
        assert missing.status_code == 404 and "BUDGET_LINE_NOT_FOUND" in missing.text
    line = budgeted.line("tenant.day", "acme-3")
    assert (line.tokens_limit, line.overridden, line.exhausted) == (1000, False, True)
    counters: FlowCounters = cast(Any, budgeted.store).counters
    assert budgeted.call(counters.limits(budget="tenant.day")) == []
