"""``intention-kernel serve`` as an operator starts it: a subprocess on a free port that
answers health and turns (a retry with the same key replays) and stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from intention_kernel.http import hash_token
from tests.support.serving import wait_until_healthy

CLI = [sys.executable, "-m", "intention_kernel.cli"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def test_hash_token_prints_a_tokens_file_line() -> None:
    done = _cli("hash-token", "alice", stdin="alice-token-0001\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"alice {hash_token('alice-token-0001')}"
    short = _cli("hash-token", "alice", stdin="short\n")
    assert short.returncode == 2 and "INVALID_TOKEN" in short.stderr


def test_serve_refuses_to_start_without_tokens(tmp_path: Path) -> None:
    store = tmp_path / "desk.db"
    assert _cli("migrate", "--store", str(store)).returncode == 0
    agent = "intention_kernel.examples.travel_desk:compile_desk"
    done = _cli("serve", "--agent", agent, "--store", str(store))
    assert done.returncode == 2 and "UNAUTHENTICATED_SERVICE" in done.stderr
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {hash_token('alice-token-0001')}\n")
    wrong = "intention_kernel.examples.travel_desk:FakeHotelProvider"
    done = _cli(
        "serve", "--agent", wrong, "--store", str(store), "--tokens", str(tokens), "--port", "1"
    )
    assert done.returncode == 2 and "INVALID_AGENT" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_answers_turns_and_stops_on_sigterm(tmp_path: Path) -> None:
    store = tmp_path / "desk.db"
    assert _cli("migrate", "--store", str(store)).returncode == 0
    tokens = tmp_path / "tokens"
    tokens.write_text(_cli("hash-token", "alice", stdin="alice-token-0001\n").stdout)
    port = _free_port()
    process = subprocess.Popen(
        [
            *CLI,
            "serve",
            "--agent",
            "intention_kernel.examples.travel_desk:compile_desk",
            "--port",
            str(port),
            "--tokens",
            str(tokens),
        ],
        env={**os.environ, "IK_STORE": str(store)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(process, url)
        assert httpx.get(f"{url}/readyz").status_code == 200
        headers = {"Authorization": "Bearer alice-token-0001", "Idempotency-Key": "turn-1"}
        body = {"text": "Find a hotel in Lisbon for 2 nights"}
        first = httpx.post(f"{url}/v1/threads/t-1/turns", json=body, headers=headers)
        again = httpx.post(f"{url}/v1/threads/t-1/turns", json=body, headers=headers)
        assert first.status_code == 200, first.text
        assert first.headers["idempotent-replayed"] == "false"
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["response"] == first.json()["response"]
        anonymous = httpx.post(f"{url}/v1/threads/t-1/turns", json=body)
        assert anonymous.status_code == 401
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert "Traceback" not in err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_the_served_inspector_shows_the_key_the_provider_received(tmp_path: Path) -> None:
    """``serve --inspector``: the uncertain queue names the key the provider recorded."""
    store = tmp_path / "desk.db"
    assert _cli("migrate", "--store", str(store)).returncode == 0
    tokens = tmp_path / "tokens"
    line = _cli("hash-token", "alice", stdin="alice-token-0001\n").stdout.strip()
    tokens.write_text(f"{line} operator\n")
    received = tmp_path / "provider-keys"
    port = _free_port()
    process = subprocess.Popen(
        [
            *CLI,
            "serve",
            "--agent",
            "tests.inspector.served_desk:lossy_desk",
            "--store",
            str(store),
            "--port",
            str(port),
            "--tokens",
            str(tokens),
            "--inspector",
        ],
        env={**os.environ, "IK_TEST_PROVIDER_KEYS": str(received)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(process, url)
        auth = {"Authorization": "Bearer alice-token-0001"}
        said = ""
        for n, text in enumerate(
            ["Find a hotel in Lisbon for 2 nights", "How much is Alfama Inn?", "Book it"], 1
        ):
            turn = httpx.post(
                f"{url}/v1/threads/t-1/turns",
                json={"text": text},
                headers={**auth, "Idempotency-Key": f"turn-{n}"},
                timeout=30,
            )
            assert turn.status_code == 200, turn.text
            said = turn.text
        interaction = httpx.get(f"{url}/v1/threads/t-1", headers=auth).json()["interaction"]
        accept = httpx.post(
            f"{url}/v1/threads/t-1/turns",
            json={"text": "", "selection": {"interaction_id": interaction["id"], "option": "yes"}},
            headers={**auth, "Idempotency-Key": "turn-4"},
            timeout=30,
        )
        assert accept.status_code == 200 and "being verified" in accept.text, (said, accept.text)
        [key] = received.read_text().split()
        with httpx.Client(base_url=url, timeout=30, follow_redirects=True) as browser:
            form = browser.get("/inspect/login").text
            csrf = form.split('name="csrf" value="')[1].split('"')[0]
            logged = browser.post(
                "/inspect/login",
                data={"csrf": csrf, "next": "/inspect/receipts", "token": "alice-token-0001"},
            )
            assert logged.status_code == 200 and "Uncertain writes" in logged.text
            assert f"<code>{key}</code>" in logged.text  # what the provider received
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
