"""demo, the outbox group, the console script and the missing-extra hint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from intention_kernel.cli import main

from .support import cli, cli_json


def test_demo_runs_and_leaves_a_store_to_inspect(tmp_path: Path) -> None:
    result = cli("demo", "--dir", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert "exactly once" in result.stdout
    status = cli_json("status", "--store", str(tmp_path / "demo.db"))
    assert status["turns"] >= 1 and status["threads"] >= 1


def test_outbox_is_a_command_group(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["outbox", "check-sink", "--sink", "bogus://nowhere"]) == 2
    assert "error: [INVALID_SINK_URL]" in capsys.readouterr().err
    assert main(["outbox", "--help"]) == 0
    assert "check-sink" in capsys.readouterr().out
    assert main(["outbox"]) in (0, 2)  # the group's help; click >= 8.2 counts it as usage


def test_missing_extra_prints_an_install_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "typer", None)
    assert main(["status"]) == 2
    assert "pip install 'intention-kernel[cli]'" in capsys.readouterr().err


def test_console_script_and_usage_errors() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "intention_kernel.cli", "status", "--store", "/nonexistent/x.db"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "[STORE_NOT_FOUND]" in done.stderr
    assert "Traceback" not in done.stderr
    unknown = cli("no-such-command")
    assert unknown.exit_code == 2
    assert main([]) in (0, 2)
