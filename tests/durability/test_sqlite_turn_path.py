"""The SQLite turn path: hand-offs to the worker thread per turn, and lock descriptors kept
open between turns without ever being shared by two holders."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
from pathlib import Path
from typing import Any

import pytest

from intention_kernel.contracts import ErrorCode, TurnScope
from intention_kernel.contracts.errors import DurabilityError
from intention_kernel.durability.sqlite import SQLiteDurability, _lease
from intention_kernel.durability.sqlite._connection import Connection
from intention_kernel.testing.conformance import (
    Provider,
    commit_simple,
    effect,
    make_events,
    make_result,
)


def count_hand_offs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Jobs submitted to the store's worker thread (one list entry each)."""
    jobs: list[int] = []
    original = Connection._run

    async def counted(self: Connection, *args: Any) -> Any:
        jobs.append(1)
        return await original(self, *args)

    monkeypatch.setattr(Connection, "_run", counted)
    return jobs


async def test_hand_offs_per_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await SQLiteDurability.open(tmp_path / "a.db")
    await commit_simple(store, "t1", "seed")
    jobs = count_hand_offs(monkeypatch)
    await commit_simple(store, "t1", "turn-1")
    assert len(jobs) == 2  # open (lock, turn, epoch, head), commit
    jobs.clear()
    _, _, replayed = await commit_simple(store, "t1", "turn-1")
    assert replayed and len(jobs) == 1  # one read, no lock
    jobs.clear()
    await commit_simple(store, "t1", "turn-2", effects=[(effect("k1"), Provider().returning(1))])
    assert len(jobs) == 4  # open, prepared, completed, commit
    await store.close()


async def test_a_held_thread_is_waited_for_then_loaded(tmp_path: Path) -> None:
    store = await SQLiteDurability.open(tmp_path / "a.db", lock_timeout=5)
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def holder(scope: TurnScope) -> None:
        inside.set()
        await leave.wait()
        await commit_simple_in(scope)

    first = asyncio.create_task(store.with_turn("t1", "turn-1", holder))
    await inside.wait()
    second = asyncio.create_task(commit_simple(store, "t1", "turn-1"))  # the same turn
    await asyncio.sleep(0.05)
    assert not second.done()  # it waits for the lock
    leave.set()
    await first
    _, _, replayed = await second
    assert replayed  # loaded under the lock: the turn had committed meanwhile
    await store.close()


async def commit_simple_in(scope: TurnScope) -> None:
    await scope.commit(make_result(scope), make_events(scope))


async def test_lock_descriptors_are_kept_idle_unlocked_and_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_lease, "IDLE_DESCRIPTORS", 3)
    store = await SQLiteDurability.open(tmp_path / "a.db")
    for n in range(5):
        await commit_simple(store, f"t{n}", "turn-1")
    idle = dict(store._locks._idle)
    assert list(idle) == ["t2", "t3", "t4"]  # bounded, the latest kept
    for thread_id in idle:  # unlocked: another descriptor locks it at once
        probe = os.open(store._locks.path_for(thread_id), os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    await commit_simple(store, "t4", "turn-2")
    assert store._locks._idle["t4"] == idle["t4"]  # reused, not reopened
    await store.close()
    assert store._locks._idle == {}
    with pytest.raises(OSError, match="Bad file descriptor") as closed:
        os.fstat(idle["t4"])  # closed with the store
    assert closed.value.errno == errno.EBADF


async def test_two_holders_in_one_process_never_share_a_descriptor(tmp_path: Path) -> None:
    store = await SQLiteDurability.open(tmp_path / "a.db", lock_timeout=0.3)
    await commit_simple(store, "t1", "turn-1")  # leaves an idle descriptor for t1
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def holder(scope: TurnScope) -> None:
        inside.set()
        await leave.wait()

    first = asyncio.create_task(store.with_turn("t1", "turn-2", holder))
    await inside.wait()
    with pytest.raises(DurabilityError) as caught:
        await commit_simple(store, "t1", "turn-3")
    assert caught.value.code is ErrorCode.LOCK_TIMEOUT
    leave.set()
    await first
    await commit_simple(store, "t1", "turn-3")
    await store.close()
