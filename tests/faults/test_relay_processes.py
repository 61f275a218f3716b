"""Relay processes on one SQLite outbox (RELIABILITY.md I7, F17, F18), with a file sink.

- ``kill -9`` of a relay at RP1 (claimed), RP2 (sink acked, not marked) and RP3 (marked), then
  a restart: every committed event is delivered at least once, a duplicate is the same event
  (same id, same bytes), and per thread the first deliveries follow commit order.
- 3 relay processes while a producer commits ~3,000 events: each event delivered exactly once
  (no loss, no concurrent double delivery), per-thread order.

``IK_FAULT_SCALE`` multiplies the rounds and the event count.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from intention_kernel._crashpoints import RelayCrashPoint
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing.conformance.outbox import commit_events

from .fault_support import SCALE, worker_env

WORKER = str(Path(__file__).with_name("relay_worker.py"))


def start_relay(spec: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=worker_env(),
    )


def finish(process: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    """The relay's exit code (0, or -9 when it killed itself) and its output; a relay still
    running after ``timeout`` seconds is killed and fails the test."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        raise AssertionError(f"relay did not finish in {timeout}s: {err[-2000:]}") from None
    if process.returncode not in (0, -9):
        raise AssertionError(f"relay failed ({process.returncode}): {err[-2000:]}")
    return process.returncode, out


def wait(process: subprocess.Popen[str], timeout: float = 120) -> int:
    return finish(process, timeout)[0]


def delivered_by(relays: list[subprocess.Popen[str]], timeout: float = 300) -> list[int]:
    """Wait for relays that end by themselves; how many events each delivered."""
    reports = []
    for process in relays:
        code, out = finish(process, timeout)
        assert code == 0
        reports.append(json.loads(out.splitlines()[-1])["delivered"])
    return reports


async def commit_workload(db: Path, *, threads: int, turns: int, per_turn: int) -> None:
    """Interleaved turns of several threads (turn by turn, so positions mix threads)."""
    store = await SQLiteDurability.open(db)
    try:
        for turn in range(turns):
            for thread in range(threads):
                await commit_events(store, f"t{thread}", f"turn-{turn:04d}", per_turn)
    finally:
        await store.close()


async def committed_order(db: Path) -> dict[str, list[str]]:
    store = await SQLiteDurability.open(db)
    try:
        order: dict[str, list[str]] = {}
        after = 0
        while batch := await store.read_outbox(after_position=after, limit=10_000):
            for stored in batch:
                order.setdefault(stored.event.thread_id, []).append(stored.event.id)
            after = batch[-1].position
        return order
    finally:
        await store.close()


def read_sink(path: Path) -> tuple[dict[str, list[str]], Counter[str]]:
    """Per thread, ids in first-delivery order; and how often each id was delivered. Every
    line of one id must be the same bytes (a duplicate is a re-delivery, not a new event)."""
    first: dict[str, list[str]] = {}
    counts: Counter[str] = Counter()
    lines: dict[str, str] = {}
    for line in path.read_text().splitlines():
        event = json.loads(line)
        counts[event["id"]] += 1
        if event["id"] in lines:
            assert lines[event["id"]] == line, f"{event['id']} re-delivered with other content"
            continue
        lines[event["id"]] = line
        first.setdefault(event["thread_id"], []).append(event["id"])
    return first, counts


@pytest.mark.parametrize("point", list(RelayCrashPoint))
def test_kill_9_of_a_relay_mid_batch_then_restart_delivers_everything(
    tmp_path: Path, point: RelayCrashPoint, capsys: pytest.CaptureFixture[str]
) -> None:
    rounds = 2 * SCALE
    duplicates = 0
    for n in range(rounds):
        db, sink = tmp_path / f"{n}.db", tmp_path / f"{n}.jsonl"
        asyncio.run(commit_workload(db, threads=6, turns=5, per_turn=4))  # 120 events
        spec = {"db": str(db), "sink": str(sink), "batch_size": 40, "claim_ttl": 1.0}
        crashed = start_relay({**spec, "crash": point.value, "nth": 1 + n % 3})
        assert wait(crashed) == -9, f"the relay did not reach {point}"
        assert wait(start_relay(spec)) == 0
        committed = asyncio.run(committed_order(db))
        first, counts = read_sink(sink)
        assert first == committed  # every event, and per thread in commit order
        duplicates += sum(count - 1 for count in counts.values())
        if point is RelayCrashPoint.RELAY_ACKED:
            assert max(counts.values()) == 2  # the acked, unmarked round went out again
        else:
            assert max(counts.values()) == 1
    with capsys.disabled():
        print(f"\nrelay kill -9 at {point}: rounds={rounds} duplicates={duplicates}")


def test_three_relay_processes_share_one_outbox(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, sink, stop = tmp_path / "shared.db", tmp_path / "shared.jsonl", tmp_path / "produced"
    asyncio.run(commit_workload(db, threads=0, turns=0, per_turn=0))  # creates the schema
    spec = {"db": str(db), "sink": str(sink), "batch_size": 50, "stop_file": str(stop)}
    relays = [start_relay({**spec, "relay_id": f"relay-{i}"}) for i in range(3)]
    try:
        # 30 threads x 20 turns x 5 events = 3,000 events (x IK_FAULT_SCALE), committed while
        # the relays run.
        asyncio.run(commit_workload(db, threads=30, turns=20 * SCALE, per_turn=5))
    finally:
        stop.touch()
    reports = delivered_by(relays)
    committed = asyncio.run(committed_order(db))
    first, counts = read_sink(sink)
    total = sum(len(ids) for ids in committed.values())
    assert total == 3000 * SCALE
    assert first == committed  # nothing lost, per-thread order
    assert set(counts.values()) == {1}  # never delivered twice
    with capsys.disabled():
        print(f"\n3 relay processes: {total} events, each delivered once; per relay {reports}")
