"""kill -9 around a confirmed write, with a real worker process on the SQLite store."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("intention_kernel.durability.sqlite")

WORKER = Path(__file__).with_name("_desk_worker.py")


def _turn(tmp: Path, turn_id: str, text: str, crash: str | None = None) -> Any:
    args = [sys.executable, str(WORKER), str(tmp / "desk.db"), str(tmp / "calls"), turn_id, text]
    done = subprocess.run(
        [*args, *([crash] if crash else [])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if crash:
        assert done.returncode == -signal.SIGKILL, done.stderr
        return None
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _calls(tmp: Path) -> list[str]:
    path = tmp / "calls"
    return path.read_text().split() if path.exists() else []


def _propose(tmp: Path) -> None:
    _turn(tmp, "1", "Find a hotel in Porto for 1 night")
    _turn(tmp, "2", "How much is Ribeira Rooms?")
    held = _turn(tmp, "3", "Book it")
    assert "Please confirm" in held["text"]


def test_killed_between_prepare_and_the_call_reports_uncertain_and_never_retries(
    tmp_path: Path,
) -> None:
    _propose(tmp_path)
    _turn(tmp_path, "4", "yes", crash="effect_prepared")
    assert _calls(tmp_path) == []
    redelivered = _turn(tmp_path, "4", "yes")
    assert not redelivered["replayed"] and "being verified" in redelivered["text"]
    # The next turns report it and never call the provider.
    _turn(tmp_path, "5", "Book it")
    later = _turn(tmp_path, "6", "yes")
    assert "being verified" in later["text"]
    assert _calls(tmp_path) == []
    again = _turn(tmp_path, "4", "yes")
    assert again["replayed"] and again["text"] == redelivered["text"]


def test_killed_after_completion_replays_the_stored_value(tmp_path: Path) -> None:
    _propose(tmp_path)
    _turn(tmp_path, "4", "yes", crash="receipt_recorded")
    assert len(_calls(tmp_path)) == 1
    redelivered = _turn(tmp_path, "4", "yes")
    assert redelivered["text"] == "Booked: Ribeira Rooms, 1 night, 95 EUR (booking BK-1001)."
    assert len(_calls(tmp_path)) == 1
