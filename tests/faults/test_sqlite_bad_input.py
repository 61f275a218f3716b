"""Bad files and bad storage: typed errors, and committed data intact and readable afterwards.

The read-only and disk-full cases use real kernel behaviour: an immutable file
(``chattr +i``), a tmpfs remounted read-only, and a tiny tmpfs that fills up. They need root,
as CI has; without it they fail loudly rather than being skipped.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from intention_kernel.contracts import (
    CheckpointCorruptError,
    DurabilityError,
    ErrorCode,
    StoreSchemaError,
    TurnScope,
)
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing.conformance import Provider, commit_simple, effect, make_result

from .fault_support import integrity_ok


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _require(*commands: str) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test needs root to mount tmpfs / set file attributes (CI runs as root)")
    for command in commands:
        if shutil.which(command) is None:
            pytest.fail(f"this test needs the {command} command")


@contextmanager
def tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    _require("mount", "umount")
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)], check=True
    )
    # A store on tmpfs is refused (a power loss loses it) unless explicitly allowed.
    allowed = os.environ.get("IK_SQLITE_ALLOW_RAM")
    os.environ["IK_SQLITE_ALLOW_RAM"] = "1"
    try:
        yield mount_point
    finally:
        if allowed is None:
            del os.environ["IK_SQLITE_ALLOW_RAM"]
        else:
            os.environ["IK_SQLITE_ALLOW_RAM"] = allowed
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


async def _seed(path: Path, turns: int = 3, **options: Any) -> None:
    store = await SQLiteDurability.open(path, **options)
    for i in range(turns):
        await commit_simple(store, "t1", f"turn-{i}")
    await store.close()


async def _committed(path: Path, **options: Any) -> list[str]:
    store = await SQLiteDurability.open(path, **options)
    turns = [t.turn_id for t in await store.list_turns("t1")]
    await store.close()
    return turns


@pytest.mark.parametrize(
    "content",
    [b"this is a text file, not a database\n" * 200, os.urandom(8192), b"SQLite format 3\x00"],
)
def test_a_non_database_file_is_refused_and_left_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    with pytest.raises((StoreSchemaError, CheckpointCorruptError)) as caught:
        run(SQLiteDurability.open(path))
    assert caught.value.code in (ErrorCode.STORE_SCHEMA_MISSING, ErrorCode.CHECKPOINT_CORRUPT)
    assert "not an SQLite database" in caught.value.message or caught.value.context["sqlite_error"]
    assert path.read_bytes() == content


CORRUPTIONS = {
    "truncated json": "UPDATE ik_turns SET result = substr(result, 1, 40) WHERE turn_id = ?",
    "invalid utf-8": "UPDATE ik_turns SET result = CAST(X'7B22FFFE' AS TEXT) WHERE turn_id = ?",
    "wrong shape": "UPDATE ik_turns SET result = '{\"thread_id\": 1}' WHERE turn_id = ?",
    "duplicate key": 'UPDATE ik_turns SET result = \'{"a": 1, "a": 2}\' WHERE turn_id = ?',
    "deep nesting": "UPDATE ik_turns SET result = '"
    + "[" * 5000
    + "]" * 5000
    + "' WHERE turn_id = ?",
    "missing turn": "DELETE FROM ik_turns WHERE turn_id = ?",
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupted_checkpoint_row_is_an_error_never_a_reset(
    tmp_path: Path, corruption: str
) -> None:
    path = tmp_path / "c.db"
    run(_seed(path))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(CORRUPTIONS[corruption], ("turn-2",))
    conn.close()

    async def main() -> None:
        store = await SQLiteDurability.open(path)
        with pytest.raises(CheckpointCorruptError) as caught:
            await store.load_checkpoint("t1")
        assert caught.value.context["thread_id"] == "t1"
        with pytest.raises(CheckpointCorruptError):
            await commit_simple(store, "t1", "turn-3")  # nothing commits on top
        assert (await store.get_turn("t1", "turn-0")) is not None  # older turns still readable
        await commit_simple(store, "t2", "turn-0")  # other threads unaffected
        await store.close()

    run(main())
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM ik_turns WHERE thread_id = 't1'").fetchone()[0] in (
        2,
        3,
    )
    assert conn.execute("SELECT revision FROM ik_heads WHERE thread_id = 't1'").fetchone() == (3,)
    conn.close()
    assert integrity_ok(path)


def test_a_corrupted_receipt_is_an_error_and_the_provider_is_not_called(tmp_path: Path) -> None:
    path = tmp_path / "r.db"

    async def main() -> None:
        store = await SQLiteDurability.open(path)
        provider = Provider()
        await commit_simple(store, "t1", "turn-1", effects=[(effect("k1"), provider.returning(1))])
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute('UPDATE ik_receipts SET document = \'{"status": "completed"\'')
        conn.close()
        with pytest.raises(CheckpointCorruptError):
            await commit_simple(
                store, "t1", "turn-2", effects=[(effect("k1"), provider.returning(2))]
            )
        assert provider.total() == 1
        await store.close()

    run(main())
    assert integrity_ok(path)


def test_a_read_only_file_can_be_read_and_refuses_writes(tmp_path: Path) -> None:
    _require("chattr")
    path = tmp_path / "ro.db"
    run(_seed(path))
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:

        async def main() -> None:
            store = await SQLiteDurability.open(path)
            checkpoint = await store.load_checkpoint("t1")
            assert checkpoint is not None and checkpoint.revision == 3
            with pytest.raises(DurabilityError) as caught:
                await commit_simple(store, "t1", "turn-3")
            assert caught.value.code == ErrorCode.STORE_READ_ONLY
            assert not caught.value.retryable
            assert len(await store.list_turns("t1")) == 3
            await store.close()

        run(main())
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    assert run(_committed(path)) == ["turn-0", "turn-1", "turn-2"]
    assert integrity_ok(path)


def test_a_read_only_filesystem_gives_store_read_only(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "mnt", "4m") as mount:
        path = mount / "ro.db"
        run(_seed(path))
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        with pytest.raises(DurabilityError) as caught:
            run(SQLiteDurability.open(path))
        assert caught.value.code == ErrorCode.STORE_READ_ONLY
        subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
        assert run(_committed(path)) == ["turn-0", "turn-1", "turn-2"]
        assert integrity_ok(path)


def test_a_full_disk_gives_store_full_and_keeps_committed_turns(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "mnt", "1m") as mount:
        path = mount / "full.db"
        committed: list[str] = []

        async def fill() -> DurabilityError:
            store = await SQLiteDurability.open(path)
            try:
                for i in range(200):

                    async def big(scope: TurnScope) -> None:
                        await scope.commit(make_result(scope, {"blob": "x" * 50_000}))

                    await store.with_turn("t1", f"turn-{i}", big)
                    committed.append(f"turn-{i}")
            except DurabilityError as exc:
                return exc
            finally:
                await store.close()
            raise AssertionError("the disk never filled up")

        error = run(fill())
        assert error.code == ErrorCode.STORE_FULL
        assert committed, "some turns commit before the disk is full"
        assert integrity_ok(path)
        subprocess.run(["mount", "-o", "remount,size=16m", str(mount)], check=True)
        assert run(_committed(path)) == committed[:100]

        async def after() -> int:
            store = await SQLiteDurability.open(path)
            result, _, _ = await commit_simple(store, "t1", "after-space-freed")
            await store.close()
            return result.checkpoint.revision

        assert run(after()) == len(committed) + 1
        assert integrity_ok(path)
