"""Screenshots of the main pages at 1280x800, for ``docs/inspector.md``.

``IK_SCREENSHOTS=docs/images .venv/bin/pytest tests/inspector/test_screenshots.py`` writes
them into the docs; without it they go to a temporary directory (and are checked all the same).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from .harness import Live, log_in, navigate, provider_key


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    running = Live("sqlite", tmp_path_factory.mktemp("screenshots")).start()
    try:
        yield running
    finally:
        running.stop()


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def test_screenshots_of_the_main_pages(live: Live, browser: WebDriver, tmp_path: Path) -> None:
    target = Path(os.environ.get("IK_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    browser.set_window_size(1280, 800)
    width, height = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(1280 + 1280 - width, 800 + 800 - height)
    shots: list[Path] = []

    def shoot(name: str) -> None:
        path = target / f"inspector-{name}.png"
        assert browser.save_screenshot(str(path))
        shots.append(path)

    log_in(browser, live, "alice", "/threads?q=t")
    shoot("threads")
    browser.get(live.page(f"/threads/{live.seeded.lost[0]}"))
    shoot("thread")
    browser.get(live.page("/receipts"))
    shoot("uncertain")
    receipt = live.uncertain(live.seeded.lost[0])
    booking = live.desk.provider.find(provider_key(receipt))
    navigate(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "Review").click)
    browser.find_element(By.ID, "outcome-completed").click()
    browser.find_element(By.ID, "value").send_keys(json.dumps(booking))
    browser.find_element(By.ID, "note").send_keys("BK-1002 found in the provider's dashboard")
    navigate(browser, browser.find_element(By.XPATH, "//button[text()='Review the record']").click)
    shoot("confirm")
    assert [png_size(p) for p in shots] == [(1280, 800)] * 4
