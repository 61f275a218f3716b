"""SQLite's worker thread (``_connection.Connection``) and the own-text head cache.

A cancelled caller drops a job that has not started, and waits for one that has (a COMMIT on
the worker cannot be interrupted); the re-raised cancellation is never swallowed. A head text
this process committed is read with the cheaper decoder, any other text with the checked one.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from intention_kernel.contracts import CheckpointCorruptError
from intention_kernel.durability._documents import OwnTexts
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.durability.sqlite._connection import Connection
from intention_kernel.testing.conformance import commit_simple


async def test_a_job_cancelled_before_it_started_never_runs(tmp_path: Path) -> None:
    db = Connection(tmp_path / "a.db", busy_timeout=5.0)
    gate = threading.Event()
    ran: list[str] = []

    def blocker(conn: sqlite3.Connection) -> None:
        gate.wait(5)

    first = asyncio.ensure_future(db.read(blocker))
    second = asyncio.ensure_future(db.read(lambda conn: ran.append("second")))
    await asyncio.sleep(0.05)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    gate.set()
    await first
    assert await db.read(lambda conn: 7) == 7  # the worker carried on past the dropped job
    assert ran == []
    await db.close()


async def test_a_started_job_is_waited_for_and_the_cancel_is_re_raised(tmp_path: Path) -> None:
    db = Connection(tmp_path / "a.db", busy_timeout=5.0)
    await db.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    started, gate = threading.Event(), threading.Event()

    def slow_insert(conn: sqlite3.Connection) -> None:
        started.set()
        gate.wait(5)
        conn.execute("INSERT INTO t VALUES (1)")

    task = asyncio.ensure_future(db.write(slow_insert))
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done()  # still waiting for the transaction to end
    task.cancel()  # a repeated cancel changes nothing
    await asyncio.sleep(0.02)
    assert not task.done()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await db.read(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()[0]) == 1
    await db.close()


async def test_errors_come_back_and_a_closed_connection_refuses(tmp_path: Path) -> None:
    db = Connection(tmp_path / "a.db", busy_timeout=5.0)

    def boom(conn: sqlite3.Connection) -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await db.read(boom)
    await db.close()
    with pytest.raises(RuntimeError):
        await db.read(lambda conn: None)


def test_own_texts_keep_the_latest_threads_within_their_bound() -> None:
    own = OwnTexts(max_bytes=10)
    own.remember("a", b"1234")
    own.remember("b", b"5678")
    own.remember("c", b"90ab")  # 12 bytes: the least recently committed thread goes
    assert not own.is_own("a", b"1234")
    assert own.is_own("b", b"5678") and own.is_own("c", b"90ab")
    own.remember("b", b"x" * 11)  # larger than the bound: not kept, and the old text is gone
    assert not own.is_own("b", b"5678") and not own.is_own("b", b"x" * 11)
    assert not own.is_own("c", b"other")


async def test_a_head_written_by_another_process_is_still_checked(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = await SQLiteDurability.open(path)
    await commit_simple(store, "t1", "turn-1")
    # Rewrite the head's text behind the store's back (as another process, or a bad disk):
    # no longer this process's own text, so it goes through the checked decoder and is refused.
    conn = sqlite3.connect(path)
    conn.execute(
        'UPDATE ik_turns SET result = replace(result, \'"revision":1\', \'"revision":1,'
        ' "revision":1\') WHERE thread_id = ?',
        ("t1",),
    )
    conn.commit()
    conn.close()
    with pytest.raises(CheckpointCorruptError):
        await store.load_checkpoint("t1")
    with pytest.raises(CheckpointCorruptError):
        await commit_simple(store, "t1", "turn-2")
    await store.close()
