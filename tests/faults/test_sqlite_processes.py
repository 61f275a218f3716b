"""Several real processes sharing one SQLite file: serialization, replay, crash release."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from intention_kernel.durability.sqlite import SQLiteDurability

from .fault_support import (
    SCALE,
    finish,
    inspect,
    integrity_ok,
    overlaps,
    provider_process,
    read_probe,
    release_together,
    start_worker,
)


def _create(db: Path) -> None:
    async def main() -> None:
        store = await SQLiteDurability.open(db)
        await store.close()

    asyncio.run(main())


def test_same_turn_from_8_processes_runs_once_and_all_get_the_same_result(
    tmp_path: Path,
) -> None:
    db, probe = tmp_path / "same.db", tmp_path / "probe.log"
    # No file yet: the 8 workers also race to create it and apply the migrations.
    with provider_process() as provider:
        spec = {
            "db": str(db),
            "thread": "t-same",
            "turn": "turn-1",
            "key": "test.call:charge-1",
            "provider": provider.url,
            "probe": str(probe),
            "hold": 0.05,
            "barrier": True,
        }
        workers = [start_worker(spec) for _ in range(8)]
        release_together(workers)
        results = [finish(w) for w in workers]
        assert all(r.returncode == 0 for r in results), [r.stderr[-500:] for r in results]
        outcomes = sorted(r.lines[0]["outcome"] for r in results)
        assert outcomes == ["committed"] + ["replayed"] * 7
        assert len({str(r.lines[0]["response"]) for r in results}) == 1
        assert provider.calls("t-same", "test.call:charge-1") == 1
        assert provider.stats()["unprepared"] == []
    assert [row[0] for row in read_probe(probe)] == ["enter", "exit"]
    state = inspect(db, "t-same")
    assert state.turns == ["turn-1"] and state.outbox == 1
    assert integrity_ok(db)


def test_4_processes_on_one_thread_never_overlap_and_lose_no_turn(tmp_path: Path) -> None:
    db, probe = tmp_path / "hammer.db", tmp_path / "probe.log"
    _create(db)
    per_worker = 12 * SCALE
    workers = [
        start_worker(
            {
                "db": str(db),
                "thread": "t-hammer",
                "turns": [f"w{n}-turn-{i}" for i in range(per_worker)],
                "probe": str(probe),
                "hold": 0.002,
                "barrier": True,
            }
        )
        for n in range(4)
    ]
    release_together(workers)
    results = [finish(w, timeout=120) for w in workers]
    assert all(r.returncode == 0 for r in results), [r.stderr[-500:] for r in results]
    assert all(line["outcome"] == "committed" for r in results for line in r.lines)
    rows = read_probe(probe)
    assert len(rows) == 2 * 4 * per_worker
    assert overlaps(rows) == 0
    assert len({pid for _, pid, _, _ in rows}) == 4
    state = inspect(db, "t-hammer")
    assert len(state.turns) == 4 * per_worker
    assert state.head is not None and state.head[0] == 4 * per_worker
    assert state.outbox == 4 * per_worker
    assert integrity_ok(db)


def _wait_for(probe: Path, event: str, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while sum(row[0] == event for row in read_probe(probe)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} {event} events"
        time.sleep(0.01)


def test_processes_on_different_threads_run_concurrently_with_no_transaction_open(
    tmp_path: Path,
) -> None:
    db, probe = tmp_path / "parallel.db", tmp_path / "probe.log"
    _create(db)
    workers = [
        start_worker(
            {
                "db": str(db),
                "thread": f"t-{n}",
                "turn": "turn-1",
                "probe": str(probe),
                "hold": 1.0,
                "barrier": True,
            }
        )
        for n in range(2)
    ]
    release_together(workers)
    _wait_for(probe, "enter", 2)
    # Both turns are inside their operation: neither holds a database transaction.
    conn = sqlite3.connect(db, timeout=0.5, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("ROLLBACK")
    conn.close()
    inside_when_checked = not any(row[0] == "exit" for row in read_probe(probe))
    results = [finish(w) for w in workers]
    assert all(r.returncode == 0 for r in results)
    assert inside_when_checked
    rows = read_probe(probe)
    enters = {pid: at for event, pid, _, at in rows if event == "enter"}
    exits = {pid: at for event, pid, _, at in rows if event == "exit"}
    first, second = sorted(enters, key=enters.__getitem__)
    # The second thread entered while the first was still inside its 1 s hold.
    assert enters[second] < exits[first]


def test_a_paused_holder_keeps_the_lease_and_waiters_time_out(tmp_path: Path) -> None:
    db, probe = tmp_path / "paused.db", tmp_path / "probe.log"
    _create(db)
    holder = start_worker(
        {"db": str(db), "thread": "t-stop", "turn": "held", "probe": str(probe), "hold": 0.5}
    )
    _wait_for(probe, "enter", 1)
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        waiter = finish(
            start_worker({"db": str(db), "thread": "t-stop", "turn": "other", "lock_timeout": 0.5})
        )
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    assert waiter.lines[0]["outcome"] == "error:LOCK_TIMEOUT"
    assert finish(holder).lines[0]["outcome"] == "committed"
    assert inspect(db, "t-stop").turns == ["held"]


def test_a_holder_whose_lease_was_taken_over_is_fenced(tmp_path: Path) -> None:
    """Two processes configured with different lock directories both get the OS lock; the
    epoch row still lets only the newest holder write (ledger and commit)."""
    db, probe = tmp_path / "fence.db", tmp_path / "probe.log"
    _create(db)
    with provider_process() as provider:
        stale = start_worker(
            {
                "db": str(db),
                "thread": "t-fence",
                "turn": "stale",
                "key": "test.call:fenced",
                "provider": provider.url,
                "probe": str(probe),
                "pause": 3.0,
                "lock_dir": str(tmp_path / "locks-a"),
            }
        )
        _wait_for(probe, "enter", 1)
        newer = finish(
            start_worker(
                {
                    "db": str(db),
                    "thread": "t-fence",
                    "turn": "newer",
                    "lock_dir": str(tmp_path / "locks-b"),
                }
            )
        )
        assert newer.lines[0]["outcome"] == "committed"
        assert finish(stale).lines[0]["outcome"] == "error:LEASE_LOST"
        assert provider.calls("t-fence", "test.call:fenced") == 0
    state = inspect(db, "t-fence")
    assert state.turns == ["newer"] and state.receipts == {}


def test_kill_9_of_a_lease_holder_frees_the_thread_within_1_second(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, probe = tmp_path / "kill.db", tmp_path / "probe.log"
    _create(db)
    rounds = 2 * SCALE
    takeovers: list[float] = []
    for n in range(rounds):
        thread = f"t-kill-{n}"
        holder = start_worker(
            {"db": str(db), "thread": thread, "turn": "held", "probe": str(probe), "hold": 60}
        )
        waiter = start_worker(
            {
                "db": str(db),
                "thread": thread,
                "turn": "next",
                "probe": str(probe),
                "barrier": True,
                "lock_timeout": 20,
            }
        )
        deadline = time.monotonic() + 30
        while not any(r[0] == "enter" and r[1] == holder.pid for r in read_probe(probe)):
            assert time.monotonic() < deadline, "the holder never entered its turn"
            time.sleep(0.01)
        release_together([waiter])
        time.sleep(0.3)  # the waiter is now polling the lease
        killed_at = time.monotonic_ns()
        os.kill(holder.pid, signal.SIGKILL)
        assert finish(holder).killed
        result = finish(waiter)
        assert result.returncode == 0 and result.lines[0]["outcome"] == "committed"
        entered = [at for event, pid, _, at in read_probe(probe) if pid == waiter.pid]
        waited = (entered[0] - killed_at) / 1e9
        takeovers.append(waited)
        assert waited < 1.0, f"took {waited:.3f}s to take over the lease"
        state = inspect(db, thread)
        assert state.turns == ["next"]
    assert integrity_ok(db)
    with capsys.disabled():
        print(f"\nsqlite lease takeover after kill -9: max {max(takeovers) * 1000:.1f} ms")


def test_8_processes_on_8_threads_commit_everything_without_busy_errors(tmp_path: Path) -> None:
    """Write contention across threads: every transaction is ``BEGIN IMMEDIATE`` with a busy
    timeout, so no ``SQLITE_BUSY_SNAPSHOT`` or ``STORE_BUSY`` surfaces and nothing is lost."""
    db = tmp_path / "contention.db"
    _create(db)
    per_worker = 15 * SCALE
    workers = [
        start_worker(
            {
                "db": str(db),
                "thread": f"t-busy-{n}",
                "turns": [f"turn-{i}" for i in range(per_worker)],
                "barrier": True,
            }
        )
        for n in range(8)
    ]
    release_together(workers)
    results = [finish(w, timeout=120) for w in workers]
    outcomes = [line["outcome"] for r in results for line in r.lines]
    assert outcomes == ["committed"] * 8 * per_worker, [r.stderr[-300:] for r in results]
    for n in range(8):
        state = inspect(db, f"t-busy-{n}")
        assert len(state.turns) == per_worker and state.outbox == per_worker
    assert integrity_ok(db)
