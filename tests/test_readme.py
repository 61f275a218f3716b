"""The README as a newcomer meets it: every Python snippet runs exactly as written, every command
it names exists, and it says what the two commands need."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from intention_kernel import (
    CapabilityContext,
    CompiledAgent,
    Completed,
    Kernel,
    define_agent,
    define_capability,
)
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEXT = README.read_text()
PYTHON: list[str] = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)
SHELL = re.findall(r"```bash\n(.*?)```", TEXT, flags=re.S)


def _run(block: str, capsys: pytest.CaptureFixture[str]) -> str:
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})  # a fresh namespace
    return capsys.readouterr().out


def test_there_are_two_quickstarts() -> None:
    assert len(PYTHON) == 2
    assert any("open_durability" in block for block in PYTHON)


def _agent_quickstart() -> str:
    [quickstart] = [b for b in PYTHON if "define_agent" in b]
    return quickstart


def test_the_agent_quickstart_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    out = _run(_agent_quickstart(), capsys)
    assert out.splitlines() == [
        "Please confirm: Book the quoted stay (quote_id: Q-7).",
        "Booked BK-Q-7.",
    ]


def test_the_agent_quickstart_is_short() -> None:
    """At most half the 102 lines it took before the short form, its fences included."""
    assert len(_agent_quickstart().splitlines()) + 2 <= 51


def test_the_agent_quickstart_type_checks_under_mypy_strict(tmp_path: Path) -> None:
    """With the project's mypy configuration (strict, the pydantic plugin). A copy with one
    typo in a call on ``context.deps`` must fail, so the check is known to bite."""
    pytest.importorskip("mypy")
    quickstart = _agent_quickstart()
    typo = quickstart.replace("context.deps.book(", "context.deps.bok(")
    assert typo != quickstart
    (tmp_path / "quickstart.py").write_text(quickstart)
    (tmp_path / "quickstart_typo.py").write_text(typo)
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            str(tmp_path / "quickstart.py"),
            str(tmp_path / "quickstart_typo.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert not [e for e in errors if "quickstart.py:" in e], checked.stdout
    assert [e for e in errors if "quickstart_typo.py:" in e and '"bok"' in e], checked.stdout


async def test_the_agent_quickstart_has_the_long_forms_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The quickstart's agent written with ``define_capability``: the same manifest and
    fingerprint, and the same answers."""
    monkeypatch.chdir(tmp_path)
    readme: dict[str, Any] = {"__name__": "readme"}
    await asyncio.to_thread(exec, compile(_agent_quickstart(), "README.md", "exec"), readme)
    capsys.readouterr()
    hotels = readme["Hotels"]

    class BookInput(BaseModel):
        quote_id: str

    class BookOutput(BaseModel):
        result: str

    async def book(context: CapabilityContext[Any], input: BookInput) -> Completed:
        effect = await context.run_effect(
            f"booking:{input.quote_id}",
            lambda authority: context.deps.book(
                input.quote_id, idempotency_key=authority.idempotency_key
            ),
        )
        return Completed(output=BookOutput(result=str(effect.value)))

    long = define_agent(
        id="desk",
        version="1.0.0",
        description="Books hotel stays.",
        deps_type=hotels,
        capabilities=[
            define_capability(
                id="hotels.book",
                version="1.0.0",
                description="Book the quoted stay.",
                input=BookInput,
                output=BookOutput,
                effect="write",
                confirmation="required",
                execute=book,
            )
        ],
    )
    short: CompiledAgent = readme["desk"]
    model = ScriptedModelGateway(
        {
            "compose": readme["compose"],
            "interpret": [
                {"intentions": [{"capability": "hotels.book", "input": {"quote_id": "Q-7"}}]},
                {"intentions": [], "answer": {"option": "yes"}},
            ],
        }
    )
    desk = Kernel(durability=MemoryDurability(), model=model, deps=hotels()).compile(long)
    assert desk.manifest == short.manifest
    assert desk.fingerprint == short.fingerprint
    held = await desk.run(thread_id="t1", turn_id="turn-1", text="Book quote Q-7")
    done = await desk.run(thread_id="t1", turn_id="turn-2", text="yes")
    assert [held.response.text, done.response.text] == [
        "Please confirm: Book the quoted stay (quote_id: Q-7).",
        "Booked BK-Q-7.",
    ]


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
