"""SQLite group commit: write jobs queued together commit in one transaction (one fsync), each
in its own savepoint, so one that fails is rolled back alone and the others commit."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from intention_kernel.contracts import DurableTurnResult, TurnConflictError, TurnScope
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.durability.sqlite._connection import Connection
from intention_kernel.testing.conformance import make_events, make_result


async def _held(db: Connection) -> tuple[threading.Event, asyncio.Task[None]]:
    """Keep the worker thread busy until the event is set, so the jobs queued meanwhile are
    taken together."""
    release = threading.Event()
    started = threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        started.set()
        release.wait(10)

    task = asyncio.create_task(db.read(hold))
    assert await asyncio.to_thread(started.wait, 10)
    return release, task


async def _queued(db: Connection, count: int) -> None:
    """Until ``count`` jobs wait in the worker's queue (bounded)."""
    for _ in range(5000):
        if db._jobs.qsize() >= count:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{db._jobs.qsize()} jobs queued, expected {count}")


def _insert(value: int, fail: bool = False) -> Callable[[sqlite3.Connection], int]:
    def write(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO t (v) VALUES (?)", (value,))
        if fail:
            raise TurnConflictError("planted conflict")
        return value

    return write


async def _table(tmp_path: Path) -> Connection:
    db = Connection(tmp_path / "g.db", busy_timeout=2.0)
    await db.write(lambda conn: conn.execute("CREATE TABLE t (v INTEGER)"))
    return db


async def test_jobs_queued_together_commit_once_and_a_failing_one_is_rolled_back_alone(
    tmp_path: Path,
) -> None:
    db = await _table(tmp_path)
    release, holder = await _held(db)
    before = db.commits
    jobs = [asyncio.create_task(db.write(_insert(v, fail=v == 2))) for v in (1, 2, 3)]
    await _queued(db, 3)
    release.set()
    await holder
    done = await asyncio.gather(*jobs, return_exceptions=True)

    assert done[0] == 1 and done[2] == 3
    assert isinstance(done[1], TurnConflictError)
    assert db.commits - before == 1  # one transaction, one fsync, for the group
    rows = await db.read(lambda conn: conn.execute("SELECT v FROM t ORDER BY v").fetchall())
    assert rows == [(1,), (3,)]  # the failing job's insert was rolled back, alone
    await db.close()


async def test_a_read_queued_after_writes_runs_after_their_commit(tmp_path: Path) -> None:
    db = await _table(tmp_path)
    release, holder = await _held(db)
    first = asyncio.create_task(db.write(_insert(1)))
    await _queued(db, 1)
    seen = asyncio.create_task(
        db.read(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()[0])
    )
    await _queued(db, 2)
    last = asyncio.create_task(db.write(_insert(2)))
    await _queued(db, 3)
    release.set()
    await holder
    assert await first == 1 and await seen == 1 and await last == 2
    await db.close()


async def test_a_caller_cancelled_while_its_group_runs_learns_the_outcome_first(
    tmp_path: Path,
) -> None:
    db = await _table(tmp_path)
    release, holder = await _held(db)
    gate, entered = threading.Event(), threading.Event()

    def slow(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO t (v) VALUES (7)")
        entered.set()
        gate.wait(10)
        return 7

    other = asyncio.create_task(db.write(_insert(8)))
    cancelled = asyncio.create_task(db.write(slow))
    await _queued(db, 2)
    release.set()
    await holder
    assert await asyncio.to_thread(entered.wait, 10)  # the group runs ``slow`` now
    cancelled.cancel()
    await asyncio.sleep(0.01)
    assert not cancelled.done()  # it waits for the group's end, not for its own cancel
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert await other == 8
    rows = await db.read(lambda conn: conn.execute("SELECT v FROM t ORDER BY v").fetchall())
    assert rows == [(7,), (8,)]  # started, so committed with its group
    await db.close()


async def test_turns_of_many_threads_commit_in_one_group_each_as_its_own(
    tmp_path: Path,
) -> None:
    """Eight turns of eight threads reach their commits together: one transaction commits
    them all, and each reads back as it was written."""
    store = await SQLiteDurability.open(tmp_path / "turns.db")
    threads = [f"t{n}" for n in range(8)]
    ready = asyncio.Barrier(len(threads) + 1)
    results: dict[str, DurableTurnResult] = {}

    def operation(thread_id: str) -> Callable[[TurnScope], Any]:
        async def run(scope: TurnScope) -> DurableTurnResult:
            result = make_result(scope, {"thread": thread_id})
            await ready.wait()
            await scope.commit(result, make_events(scope))
            results[thread_id] = result
            return result

        return run

    turns = [asyncio.create_task(store.with_turn(t, "turn-1", operation(t))) for t in threads]
    release, holder = await _held(store._db)
    before = store.commits
    await ready.wait()  # every turn holds its lease and is about to commit
    await _queued(store._db, len(threads))
    release.set()
    await holder
    await asyncio.gather(*turns)

    assert store.commits - before == 1
    assert store.commit_groups[len(threads)] == 1
    for thread_id in threads:

        async def replay(scope: TurnScope) -> DurableTurnResult | None:
            return scope.prior_result

        assert await store.with_turn(thread_id, "turn-1", replay) == results[thread_id]
    await store.close()
