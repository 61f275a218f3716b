"""Two real ``intention-kernel serve`` processes on one store, for the tests that cross
instances (a rejoin on the other one, a busy thread seen from the other one)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.serving import wait_until_healthy

CLI = [sys.executable, "-m", "intention_kernel.cli"]


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
