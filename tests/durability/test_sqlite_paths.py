"""One SQLite file, however it is named: a symlink, a symlinked directory or a bind mount
reach the same lock directory, so two holders of one thread never run at once; and a file
that is not a database is refused without leaving a lock directory behind."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from intention_kernel.contracts import DurabilityError, ErrorCode, StoreSchemaError, TurnScope
from intention_kernel.durability import open_durability
from intention_kernel.durability.sqlite import SQLiteDurability


def _symlinked_file(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "data").mkdir()
    real = tmp_path / "data" / "store.db"
    link = tmp_path / "store-link.db"
    link.symlink_to(real)
    return real, link


def _symlinked_directory(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "data").mkdir()
    (tmp_path / "current").symlink_to(tmp_path / "data", target_is_directory=True)
    return tmp_path / "data" / "store.db", tmp_path / "current" / "store.db"


@pytest.fixture
def bind_mount(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The data directory mounted a second time (``mount --bind``, as root), unmounted after."""
    data, second = tmp_path / "data", tmp_path / "mnt"
    data.mkdir()
    second.mkdir()
    subprocess.run(["mount", "--bind", str(data), str(second)], check=True)
    try:
        yield data / "store.db", second / "store.db"
    finally:
        subprocess.run(["umount", str(second)], check=True)


async def _exclusive(first_path: Path, second_path: Path) -> None:
    """While a turn through the first name holds the thread, one through the second waits
    and times out (``LOCK_TIMEOUT``), then holds it once the first has finished."""
    first = await SQLiteDurability.open(first_path)
    second = await SQLiteDurability.open(second_path, lock_timeout=0.3)
    held, release = asyncio.Event(), asyncio.Event()

    async def hold(scope: TurnScope) -> None:
        held.set()
        await release.wait()

    async def nothing(scope: TurnScope) -> str:
        return "ran"

    try:
        holder = asyncio.create_task(first.with_turn("t1", "turn-1", hold))
        await held.wait()
        with pytest.raises(DurabilityError) as caught:
            await second.with_turn("t1", "turn-2", nothing)
        assert caught.value.code is ErrorCode.LOCK_TIMEOUT
        release.set()
        await holder
        assert await second.with_turn("t1", "turn-2", nothing) == "ran"
    finally:
        await first.close()
        await second.close()


async def test_a_symlinked_file_is_one_store(tmp_path: Path) -> None:
    real, link = _symlinked_file(tmp_path)
    await _exclusive(real, link)
    await _exclusive(link, real)
    assert not (tmp_path / "store-link.db.locks").exists()  # one lock directory, by the file


async def test_a_symlinked_directory_is_one_store(tmp_path: Path) -> None:
    await _exclusive(*_symlinked_directory(tmp_path))


async def test_a_bind_mounted_directory_is_one_store(bind_mount: tuple[Path, Path]) -> None:
    await _exclusive(*bind_mount)


_HOLD = """
import asyncio, sys
from intention_kernel.durability.sqlite import SQLiteDurability

async def main():
    store = await SQLiteDurability.open(sys.argv[1])
    async def hold(scope):
        print("held", flush=True)
        sys.stdin.readline()
    await store.with_turn("t1", "turn-1", hold)
    await store.close()

asyncio.run(main())
"""


async def test_another_process_through_a_symlink_holds_the_same_lease(tmp_path: Path) -> None:
    real, link = _symlinked_file(tmp_path)
    await (await SQLiteDurability.open(real)).close()  # the file, with its schema
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, waited for in a thread
        [sys.executable, "-c", _HOLD, str(link)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        assert await asyncio.to_thread(process.stdout.readline) == "held\n"
        store = await SQLiteDurability.open(real, lock_timeout=0.3)
        try:

            async def nothing(scope: TurnScope) -> None:
                return None

            with pytest.raises(DurabilityError) as caught:
                await store.with_turn("t1", "turn-2", nothing)
            assert caught.value.code is ErrorCode.LOCK_TIMEOUT
        finally:
            await store.close()
        await asyncio.to_thread(process.communicate, "\n", 30)
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()  # closes the pipes


@pytest.mark.parametrize("opener", ["adapter", "url"])
async def test_a_file_that_is_not_a_database_leaves_no_lock_directory(
    tmp_path: Path, opener: str
) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are notes, not a database\n" * 10)
    before = sorted(os.listdir(tmp_path))
    opening = (
        SQLiteDurability.open(path) if opener == "adapter" else open_durability(f"sqlite:///{path}")
    )
    with pytest.raises(StoreSchemaError) as caught:
        await opening
    assert caught.value.code is ErrorCode.STORE_SCHEMA_MISSING
    assert sorted(os.listdir(tmp_path)) == before
    assert path.read_text() == "these are notes, not a database\n" * 10


async def test_an_existing_lock_directory_is_kept(tmp_path: Path) -> None:
    """The directory was there before (a group's shared one, made by the operator): a failed
    open leaves it as it was."""
    path = tmp_path / "notes.txt"
    path.write_text("not a database either\n" * 10)
    locks = tmp_path / "notes.txt.locks"
    locks.mkdir(mode=0o2770)
    with pytest.raises(StoreSchemaError):
        await SQLiteDurability.open(path)
    assert locks.is_dir()
