"""The README's first command: the demo runs in a fresh process, quickly, and tells the story."""

from __future__ import annotations

import subprocess
import sys
import time


def test_the_demo_runs_and_prints_the_transcript() -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "intention_kernel.demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for line in (
        "store: SQLite (",
        "1. A question is answered",
        "In Lisbon for 2 nights: Alfama Inn (120 EUR/night)",
        "Please confirm: Book the quoted stay (quote_id: Q-alfama-inn-2n).",
        "provider calls so far: 0",
        "Breakfast is included at every hotel we book.",
        "Booked: Alfama Inn, 2 nights, 240 EUR (booking BK-1001).",
        "approval: accepted by ann@example.com",
        "replayed=True, same answer=True, provider calls: 1",
        "the outcome is being",
        ": uncertain; outbox event effect.uncertain",
        "Booked: Ribeira Rooms, 1 night, 95 EUR (booking BK-1002).",
        "every booking reached the provider exactly once",
    ):
        assert line in out, line
    assert "DEMO CHECK FAILED" not in done.stderr
    assert time.monotonic() - started < 30
