"""``serve --agent`` takes what ``check-compat --agent`` takes: a factory of the opened store,
a compiled agent (served on the store ``serve`` opened) or a definition (compiled there); an
invalid definition is named problem by problem, exit 5."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from intention_kernel.http import hash_token
from tests.support.serving import wait_until_healthy

from .support import cli

CLI = [sys.executable, "-m", "intention_kernel.cli"]
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> tuple[Path, Path]:
    store = tmp_path / "desk.db"
    assert cli("migrate", "--store", str(store)).exit_code == 0
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {hash_token('alice-token-0001')}\n")
    return store, tokens


def _tokens_port(tokens: Path, port: int) -> list[str]:
    return ["--tokens", str(tokens), "--port", str(port)]


def _serve(spec: str, store: Path, tokens: Path, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "serve", "--agent", spec, "--store", str(store), *_tokens_port(tokens, port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.parametrize(
    "spec", ["tests.cli.agents:desk", "intention_kernel.examples.travel_desk:compile_desk"]
)
def test_a_compiled_agent_or_a_factory_is_served_on_the_opened_store(
    served: tuple[Path, Path], spec: str
) -> None:
    store, tokens = served
    port = _free_port()
    process = _serve(spec, store, tokens, port)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(process, url)
        headers = {"Authorization": "Bearer alice-token-0001", "Idempotency-Key": "turn-1"}
        body = {"text": "Find a hotel in Lisbon for 2 nights"}
        answer = httpx.post(f"{url}/v1/threads/t-1/turns", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
    listed = cli("threads", "--store", str(store), "--json")
    assert '"t-1"' in listed.stdout, listed.stdout  # committed where serve reads


def test_an_invalid_definition_is_named_problem_by_problem(served: tuple[Path, Path]) -> None:
    store, tokens = served
    for spec in ("tests.cli.agents:invalid_factory", "tests.cli.agents:invalid"):
        done = subprocess.run(
            [*CLI, "serve", "--agent", spec, "--store", str(store), *_tokens_port(tokens, 1)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 5, done.stderr
        assert "[AGENT_COMPILATION_FAILED] the agent definition has" in done.stderr
        assert "capability 'bad.description': description must be non-blank text" in done.stderr
        assert "(empty_description)" in done.stderr and "(invalid_version)" in done.stderr
        assert "Traceback" not in done.stderr
