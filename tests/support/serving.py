"""Waiting for a ``serve`` process started by a test: its health check answers, or it died."""

from __future__ import annotations

import subprocess
import time

import httpx


def wait_until_healthy(process: subprocess.Popen[str], url: str, *, within: float = 30) -> None:
    """Return once ``url/healthz`` answers 200; fail with the process's output if it exits
    first, or when ``within`` seconds pass."""
    deadline = time.monotonic() + within
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "serve did not start"
        time.sleep(0.1)
