"""The README's first command: the demo runs in a fresh process, quickly, tells the story (the
three promises, one of them with a real ``kill -9``) and names the next command; ``scripts/setup``
installs only when something changed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
        "8. A worker process is killed mid-turn (kill -9)",
        "killed with SIGKILL while its turn was running",
        "nothing committed was lost",
        "9. A submitted turn finishes on its own",
        "made the booking, then was killed with SIGKILL",
        "done after 2 attempts",
        "every booking reached the provider exactly once",
        "next: scripts/demo --dir demo-store",
    ):
        assert line in out, line
    assert "DEMO CHECK FAILED" not in done.stderr
    assert time.monotonic() - started < 30


def test_a_kept_store_names_the_command_to_inspect_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "intention_kernel.demo", "--dir", str(tmp_path / "kept")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("next: ") and f"threads --store {tmp_path / 'kept' / 'demo.db'}" in last
    assert (tmp_path / "kept" / "demo.db").exists()


def _setup(project: Path, *extras: str) -> list[str]:
    log = project / "pip.log"
    log.write_text("")
    subprocess.run(
        ["bash", str(project / "scripts" / "setup"), *extras],
        cwd=project,
        check=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, "PATH": os.environ.get("PATH", "")},
    )
    return [line for line in log.read_text().splitlines() if "install" in line]


def test_setup_installs_only_when_something_changed(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "scripts" / "setup").write_text((ROOT / "scripts" / "setup").read_text())
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')
    fake = project / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(f'#!/bin/sh\necho "$*" >> {project / "pip.log"}\n')
    fake.chmod(0o755)
    assert _setup(project, "cli")  # first time: installs
    assert _setup(project, "cli") == []  # nothing changed: skipped
    assert _setup(project, "dev")  # other extras
    (project / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "2"\n')
    assert _setup(project, "dev")  # the project changed
    assert _setup(project, "dev") == []
