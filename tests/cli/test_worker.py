"""``intention-kernel worker`` as a real process on a SQLite file: it runs the turns submitted
from another process to their commit (a dead request does not stop the others), and at SIGTERM
or SIGINT it claims nothing more, lets a running turn commit within ``--grace`` (or gives it
back to the inbox after it) and exits 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from intention_kernel.durability.sqlite import SQLiteDurability
from tests.cli.inbox_agents import desk

from .support import cli, cli_json

CLI = [sys.executable, "-m", "intention_kernel.cli"]
ROOT = Path(__file__).resolve().parents[2]
AGENT = "tests.cli.inbox_agents:desk"

States = dict[tuple[str, str], str]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "work.db"
    assert cli("migrate", "--store", str(path)).exit_code == 0
    return path


def _submit(path: Path, *requests: tuple[str, str, str]) -> None:
    """Submit through the agent, as an application process does."""

    async def main() -> None:
        opened = await SQLiteDurability.open(path, migrate=False)
        try:
            agent = desk(opened)
            for thread_id, turn_id, text in requests:
                await agent.submit(thread_id=thread_id, turn_id=turn_id, text=text)
        finally:
            await opened.close()

    asyncio.run(main())


def _states(path: Path) -> States:
    rows = cli_json("inbox", "list", "--store", str(path))["requests"]
    return {(r["thread_id"], r["turn_id"]): r["state"] for r in rows}


def _wait_for(path: Path, process: subprocess.Popen[str], done: Callable[[States], bool]) -> States:
    deadline = time.monotonic() + 30
    while True:
        states = _states(path)
        if done(states):
            return states
        if process.poll() is not None:
            _, err = process.communicate()
            pytest.fail(f"the worker exited with {process.returncode}: {err}")
        if time.monotonic() > deadline:
            pytest.fail(f"the requests did not get there: {states}")
        time.sleep(0.05)


@pytest.fixture
def start() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def launch(path: Path, *options: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [*CLI, "worker", "--agent", AGENT, "--store", str(path), "--poll", "0.05", *options],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        started.append(process)
        return process

    yield launch
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_the_worker_runs_submitted_turns_and_drains_at_sigterm(
    store: Path, start: Callable[..., subprocess.Popen[str]]
) -> None:
    _submit(
        store,
        ("t-1", "u1", "where is 42"),
        ("t-1", "u2", "where is 7"),
        ("t-2", "u1", "broken"),
        ("t-2", "u2", "where is 9"),
    )
    worker = start(store, "--grace", "20", "--worker-id", "w-test")
    states = _wait_for(store, worker, lambda s: all(v in ("done", "dead") for v in s.values()))
    assert states == {
        ("t-1", "u1"): "done",
        ("t-1", "u2"): "done",
        ("t-2", "u1"): "dead",  # the model refused it: not retried, the thread went on
        ("t-2", "u2"): "done",
    }
    dead = cli_json("inbox", "list", "--store", str(store), "--state", "dead")["requests"]
    assert dead[0]["error_code"] == "MODEL_GATEWAY_FAILED", dead

    _submit(store, ("t-3", "u1", "slow 2"))
    _wait_for(store, worker, lambda s: s.get(("t-3", "u1")) == "running")
    stopped_at = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    worker.send_signal(signal.SIGTERM)  # as a process manager signalling the group may
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert time.monotonic() - stopped_at < 15
    assert _states(store)[("t-3", "u1")] == "done"  # it finished within the grace
    assert "worker w-test is stopping already" in err
    turns = cli_json("turns", "t-3", "--store", str(store))["turns"]
    assert [t["turn_id"] for t in turns] == ["u1"] and "Waited 2.0s" in str(turns[0])
    assert "worker w-test started on sqlite:///" in err
    assert "worker w-test stopping on SIGTERM: no new claims; 1 running turn(s)" in err
    assert "worker w-test stopped after 5 request(s)" in err
    assert "worker w-test stopped: 5 request(s) finished" in out
    assert "Traceback" not in err


def test_a_turn_still_running_after_the_grace_is_given_back(
    store: Path, start: Callable[..., subprocess.Popen[str]]
) -> None:
    _submit(store, ("t-1", "u1", "slow 60"))
    worker = start(store, "--grace", "0.5")
    _wait_for(store, worker, lambda s: s.get(("t-1", "u1")) == "running")
    stopped_at = time.monotonic()
    worker.send_signal(signal.SIGINT)
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert time.monotonic() - stopped_at < 15
    [request] = cli_json("inbox", "list", "--store", str(store))["requests"]
    assert request["state"] == "pending" and request["claimed_by"] is None  # given back
    assert request["attempts"] == 1
    assert cli_json("turns", "t-1", "--store", str(store), code=2)["error"]["code"] == (
        "THREAD_NOT_FOUND"
    )  # nothing committed


def test_a_second_sigint_stops_at_once(
    store: Path, start: Callable[..., subprocess.Popen[str]]
) -> None:
    _submit(store, ("t-1", "u1", "slow 60"))
    worker = start(store, "--grace", "60")
    _wait_for(store, worker, lambda s: s.get(("t-1", "u1")) == "running")
    stopped_at = time.monotonic()
    worker.send_signal(signal.SIGINT)
    time.sleep(0.3)
    worker.send_signal(signal.SIGINT)
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert time.monotonic() - stopped_at < 15
    assert "stopping now on a second SIGINT" in err and "Traceback" not in err
    [request] = cli_json("inbox", "list", "--store", str(store))["requests"]
    assert request["state"] == "pending" and request["claimed_by"] is None


@pytest.mark.parametrize(
    ("options", "code"),
    [
        (["--agent", "nonsense"], "INVALID_AGENT"),
        (["--agent", AGENT, "--concurrency", "0"], "USAGE_ERROR"),
        (["--agent", AGENT, "--claim-ttl", "nan"], "INVALID_CONFIGURATION"),
        (["--agent", AGENT, "--grace", "-1"], "INVALID_CONFIGURATION"),
    ],
)
def test_bad_options_are_refused_before_any_claim(
    store: Path, options: list[str], code: str
) -> None:
    result = cli("worker", *options, "--store", str(store))
    assert result.exit_code == 2 and f"[{code}]" in result.stderr, result.stderr
    assert _states(store) == {}


def test_a_missing_store_is_refused(tmp_path: Path) -> None:
    result = cli("worker", "--agent", AGENT, "--store", str(tmp_path / "nope.db"))
    assert result.exit_code == 2 and "[STORE_NOT_FOUND]" in result.stderr
