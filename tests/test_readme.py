"""The README as a newcomer meets it: every Python snippet runs exactly as written, every command
it names exists, and it says what the two commands need."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEXT = README.read_text()
PYTHON = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)
SHELL = re.findall(r"```bash\n(.*?)```", TEXT, flags=re.S)


def _run(block: str, capsys: pytest.CaptureFixture[str]) -> str:
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})  # a fresh namespace
    return capsys.readouterr().out


def test_there_are_two_quickstarts() -> None:
    assert len(PYTHON) == 2
    assert any("open_durability" in block for block in PYTHON)


def test_the_agent_quickstart_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    [quickstart] = [b for b in PYTHON if "define_agent" in b]
    monkeypatch.chdir(tmp_path)
    out = _run(quickstart, capsys)
    assert out.splitlines() == [
        "Please confirm: Book the quoted stay (quote_id: Q-7).",
        "Booked BK-Q-7.",
        "True",  # streamed: the text deltas add up to the committed answer
        "True",  # run_sync on a store opened with open_durability_sync
    ]
    assert (tmp_path / "desk.db").exists()


def test_the_durability_quickstart_runs_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    [quickstart] = [b for b in PYTHON if "open_durability(" in b]
    monkeypatch.chdir(tmp_path)
    first = _run(quickstart, capsys)
    again = _run(quickstart, capsys)  # the same turn delivered again: a replay
    assert first.splitlines() == [
        "charging, idempotency key payments.charge:pi_123",
        "{'charge': {'charge_id': 'ch_1'}}",
    ]
    assert again.splitlines() == ["{'charge': {'charge_id': 'ch_1'}}"]
    assert (tmp_path / "app.db").exists()


def _commands() -> list[list[str]]:
    found = []
    for block in SHELL:
        for line in block.splitlines():
            code = line.split("#", 1)[0].strip()
            for part in filter(None, re.split(r"&&|;", code)):
                found.append(shlex.split(part))
    return found


def test_every_command_it_names_exists() -> None:
    commands = _commands()
    assert ["scripts/demo"] in commands and ["scripts/test"] in commands
    for argv in commands:
        words = [w for w in argv if "=" not in w or w.startswith("-")]  # drop VAR=value
        program = words[0]
        if program.startswith("scripts/"):
            assert (ROOT / program).is_file(), program
        for word in words[1:]:
            if word.endswith(".py") or word.startswith(("tests/", "bench/")):
                assert (ROOT / word).exists(), word
        if "-m" in words:
            module = words[words.index("-m") + 1]
            assert importlib.util.find_spec(module) is not None, module


@pytest.mark.parametrize(
    "statement",
    [
        "Python 3.11",
        "needs root",
        "PostgreSQL, Redis and NATS",
        "scripts/services",
        "intention-kernel[cli]",
        "scripts/demo --dir",
        "kill -9",
    ],
)
def test_it_says_what_the_commands_need(statement: str) -> None:
    assert statement in TEXT
