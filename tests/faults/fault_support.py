"""Helpers for the SQLite fault tests: worker processes, the provider process, DB inspection."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORKER = str(Path(__file__).with_name("sqlite_worker.py"))
SCALE = max(1, int(os.environ.get("IK_FAULT_SCALE", "1")))
"""Multiplies the loop counts: 1 is the short CI version, e.g. 20 is the long campaign."""


ROOT = str(Path(__file__).resolve().parents[2])
"""The repository root: the worker, run as a script, imports the planted bugs from ``tests``."""


def worker_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "IK_PLANTED_BUG"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (ROOT, os.environ.get("PYTHONPATH"))))
    env.update(extra)
    return env


def start_worker(spec: dict[str, Any], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or worker_env(),
    )


@dataclass
class Finished:
    returncode: int
    lines: list[dict[str, Any]]
    stderr: str

    @property
    def killed(self) -> bool:
        return self.returncode == -9


def finish(process: subprocess.Popen[str], timeout: float = 60) -> Finished:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"worker did not finish in {timeout}s: {err[-2000:]}") from None
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return Finished(process.returncode, lines, err)


def run_worker(spec: dict[str, Any], env: dict[str, str] | None = None) -> Finished:
    return finish(start_worker(spec, env))


def release_together(processes: list[subprocess.Popen[str]]) -> None:
    """A start barrier: wait until every worker printed ``ready``, then let all go at once."""
    for process in processes:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "ready", f"worker failed to start: {line!r}"
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()


class ProviderProcess:
    """The fake external provider, a separate process counting calls per key."""

    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as response:
            data: dict[str, Any] = json.loads(response.read())
        return data

    def calls(self, thread: str, key: str) -> int:
        return int(self.stats()["calls"].get(f"{thread}|{key}", 0))


@contextmanager
def provider_process() -> Iterator[ProviderProcess]:
    process = start_worker({"mode": "provider", "lifetime": 900})
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield ProviderProcess(process, f"http://127.0.0.1:{port}")
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


@dataclass(frozen=True)
class ThreadState:
    """What the database holds for one thread (read with a plain connection)."""

    turns: list[str]
    head: tuple[int, str] | None
    outbox: int
    receipts: dict[str, str]


def inspect(db: Path, thread: str) -> ThreadState:
    conn = sqlite3.connect(db, timeout=10)
    try:
        turns = [
            t
            for (t,) in conn.execute(
                "SELECT turn_id FROM ik_turns WHERE thread_id = ? ORDER BY revision", (thread,)
            )
        ]
        head = conn.execute(
            "SELECT revision, turn_id FROM ik_heads WHERE thread_id = ?", (thread,)
        ).fetchone()
        outbox = conn.execute(
            "SELECT count(*) FROM ik_outbox WHERE thread_id = ?", (thread,)
        ).fetchone()[0]
        receipts = dict(
            conn.execute(
                "SELECT idempotency_key, status FROM ik_receipts WHERE thread_id = ?", (thread,)
            ).fetchall()
        )
    finally:
        conn.close()
    return ThreadState(turns, None if head is None else tuple(head), outbox, receipts)


def integrity_ok(db: Path) -> bool:
    conn = sqlite3.connect(db, timeout=10)
    try:
        return bool(conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok")
    finally:
        conn.close()


def read_probe(path: Path) -> list[tuple[str, int, str, int]]:
    """The occupancy log: (event, pid, turn, monotonic ns) in append order."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        event, pid, turn, at = line.split()
        rows.append((event, int(pid), turn, int(at)))
    return rows


def overlaps(rows: list[tuple[str, int, str, int]]) -> int:
    """How often a second holder entered before the previous one exited."""
    inside: tuple[int, str] | None = None
    count = 0
    for event, pid, turn, _ in rows:
        if event == "enter":
            if inside is not None:
                count += 1
            inside = (pid, turn)
        elif inside == (pid, turn):
            inside = None
    return count
