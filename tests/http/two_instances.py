"""Two real ``intention-kernel serve`` processes on one store, for the tests that cross
instances (a rejoin on the other one, a busy thread seen from the other one, a completion on
the other one)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from intention_kernel.http import hash_token
from tests.support.postgres import drop_schema, require_postgres, scratch_schema
from tests.support.serving import wait_until_healthy

CLI = [sys.executable, "-m", "intention_kernel.cli"]
TOKEN = "alice-token-0001"
"""Alice's bearer token on the pair (``postgres_pair``)."""
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving_pair(store: str, tokens: Path, log: Path, *options: str) -> Iterator[list[str]]:
    """Two serve processes of ``served_bookings`` on ``store`` (``options`` added to each
    command line): their URLs. Stopped with SIGTERM: status 0 and no traceback."""
    processes: list[subprocess.Popen[str]] = []
    urls: list[str] = []
    try:
        for _ in range(2):
            port = free_port()
            processes.append(
                subprocess.Popen(
                    [
                        *CLI,
                        "serve",
                        "--agent",
                        "tests.http.served_bookings:booking_agent",
                        "--store",
                        store,
                        "--port",
                        str(port),
                        "--tokens",
                        str(tokens),
                        "--pool-size",
                        "4",
                        *options,
                    ],
                    env={**os.environ, "IK_TEST_BOOKINGS": str(log)},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for process, url in zip(processes, urls, strict=True):
            wait_until_healthy(process, url)
        yield urls
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            _, err = process.communicate(timeout=60)
            assert process.returncode == 0, err
            assert "Traceback" not in err, err
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


@contextmanager
def postgres_pair(tmp_path: Path, name: str, *options: str) -> Iterator[list[str]]:
    """A migrated scratch schema ``name`` and ``serving_pair`` on it (alice's ``TOKEN``, the
    hotel's log at ``tmp_path / "bookings"``): their URLs; the schema dropped at the end."""
    dsn = require_postgres()
    schema = scratch_schema(name)
    store = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {hash_token(TOKEN)}\n")
    try:
        migrated = subprocess.run(
            [*CLI, "migrate", "--store", store], capture_output=True, text=True, timeout=60
        )
        assert migrated.returncode == 0, migrated.stderr
        with serving_pair(store, tokens, tmp_path / "bookings", *options) as urls:
            yield urls
    finally:
        asyncio.run(drop_schema(dsn, schema))
