"""SQLite-specific behaviour beyond the conformance suite: opening, schema, settings, factory."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from intention_kernel.contracts import (
    ConfigurationError,
    ErrorCode,
    LeaseLostError,
    StoreSchemaError,
    TurnScope,
)
from intention_kernel.durability import MemoryDurability, open_durability
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.durability.sqlite._location import check_local, filesystem_type
from intention_kernel.durability.sqlite._schema import SCHEMA_VERSION
from intention_kernel.testing.conformance import Provider, commit_simple, effect


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_open_from_a_url_and_settings_are_durable(tmp_path: Path) -> None:
    path = tmp_path / "a.db"

    async def main() -> None:
        store = await open_durability(f"sqlite:///{path}")
        assert isinstance(store, SQLiteDurability) and store.path == path
        await commit_simple(store, "t1", "turn-1")
        await store.close()

    run(main())
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    versions = conn.execute("SELECT version FROM ik_schema ORDER BY version").fetchall()
    assert [v for (v,) in versions] == list(range(1, SCHEMA_VERSION + 1))
    conn.close()
    assert (tmp_path / "a.db.locks").is_dir()


def test_connection_uses_full_sync_and_a_busy_timeout(tmp_path: Path) -> None:
    async def main() -> tuple[int, int]:
        store = await SQLiteDurability.open(tmp_path / "s.db", busy_timeout=2.5)

        def pragmas(conn: sqlite3.Connection) -> tuple[int, int]:
            sync = conn.execute("PRAGMA synchronous").fetchone()[0]
            busy = conn.execute("PRAGMA busy_timeout").fetchone()[0]
            return int(sync), int(busy)

        values = await store._db.read(pragmas)
        await store.close()
        return values

    assert run(main()) == (2, 2500)  # 2 = FULL


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///rel/app.db", Path.cwd() / "rel/app.db"),
        ("sqlite:////abs/app.db", Path("/abs/app.db")),
        ("sqlite:////abs/my%20app.db", Path("/abs/my app.db")),
        ("/plain/path.db", Path("/plain/path.db")),
    ],
)
def test_locations_are_parsed(url: str, expected: Path) -> None:
    assert SQLiteDurability(url).path == expected


@pytest.mark.parametrize(
    "url",
    [
        "",
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite://host/app.db",
        "sqlite:////app.db?mode=ro",
        "postgres:///app.db",
    ],
)
def test_bad_locations_are_refused(url: str) -> None:
    with pytest.raises(ConfigurationError):
        SQLiteDurability(url)


@pytest.mark.parametrize("busy", [0, -1, 601, "5"])
def test_bad_busy_timeout_is_refused(tmp_path: Path, busy: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SQLiteDurability(tmp_path / "x.db", busy_timeout=busy)
    assert caught.value.context["setting"] == "busy_timeout"


MOUNTS = r"""/dev/vda / ext4 rw,relatime 0 0
server:/export /mnt/shared nfs4 rw,relatime 0 0
//nas/share /mnt/smb cifs rw 0 0
user@host:/data /mnt/ssh\040dir fuse.sshfs rw 0 0
tmpfs /mnt/shared/local tmpfs rw 0 0
"""


@pytest.mark.parametrize(
    ("path", "fstype"),
    [
        ("/home/app/db.sqlite", "ext4"),
        ("/mnt/shared/app.db", "nfs4"),
        ("/mnt/shared/local/app.db", "tmpfs"),
        ("/mnt/smb/app.db", "cifs"),
        ("/mnt/ssh dir/app.db", "fuse.sshfs"),
        ("/mnt/sharedother/app.db", "ext4"),
    ],
)
def test_filesystem_type_uses_the_longest_mount_point(path: str, fstype: str) -> None:
    assert filesystem_type(Path(path), MOUNTS) == fstype


def test_a_network_filesystem_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\nserver:/x {tmp_path} nfs rw 0 0\n")
    with pytest.raises(ConfigurationError) as caught:
        check_local(tmp_path / "app.db", mounts_file=str(mounts))
    assert caught.value.context["filesystem"] == "nfs"
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\ntmpfs {tmp_path} tmpfs rw 0 0\n")
    monkeypatch.delenv("IK_SQLITE_ALLOW_RAM", raising=False)
    with pytest.raises(ConfigurationError) as caught:  # a power loss would lose every turn
        check_local(tmp_path / "deeper" / "app.db", mounts_file=str(mounts))
    assert caught.value.context["filesystem"] == "tmpfs"
    monkeypatch.setenv("IK_SQLITE_ALLOW_RAM", "1")
    check_local(tmp_path / "deeper" / "app.db", mounts_file=str(mounts))


def test_a_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    run(_open_and_close(path))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("INSERT INTO ik_schema (version, applied_at) VALUES (?, 'later')", (99,))
    conn.close()
    with pytest.raises(StoreSchemaError) as caught:
        run(_open_and_close(path))
    assert caught.value.code == ErrorCode.STORE_SCHEMA_TOO_NEW
    assert caught.value.context == {"found": 99, "supported": SCHEMA_VERSION}


def test_migrations_run_once_when_many_open_a_new_file_at_once(tmp_path: Path) -> None:
    """Switching a new file to WAL races between openers; none may fail with STORE_BUSY."""

    async def main(path: Path) -> None:
        stores = await asyncio.gather(*(SQLiteDurability.open(path) for _ in range(8)))
        for store in stores:
            await store.close()

    for n in range(10):
        path = tmp_path / f"race-{n}.db"
        run(main(path))
        conn = sqlite3.connect(path)
        assert conn.execute("SELECT count(*) FROM ik_schema").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.close()


def test_factory_opens_memory_and_refuses_unknown_schemes() -> None:
    async def main() -> None:
        store = await open_durability("memory://")
        assert isinstance(store, MemoryDurability)
        await store.close()
        for bad in ["redis://x", "nonsense", ""]:
            with pytest.raises(ConfigurationError):
                await open_durability(bad)

    run(main())


def test_listing_uncertain_receipts_uses_the_status_index(tmp_path: Path) -> None:
    run(_open_and_close(tmp_path / "i.db"))
    conn = sqlite3.connect(tmp_path / "i.db")
    plan = conn.execute(
        "EXPLAIN QUERY PLAN SELECT document FROM ik_receipts WHERE status = ?"
        " ORDER BY updated_us, receipt_id LIMIT 10",
        ("uncertain",),
    ).fetchall()
    conn.close()
    assert any("ik_receipts_by_status" in str(row) for row in plan)
    assert not any("TEMP B-TREE" in str(row) for row in plan)


def test_a_turn_costs_one_commit_plus_two_per_effect(tmp_path: Path) -> None:
    """The lease epoch moves inside the turn's first write, not in a commit of its own."""

    async def main() -> tuple[int, int]:
        store = await SQLiteDurability.open(tmp_path / "c.db")
        before = store.commits
        await commit_simple(store, "t1", "turn-1")
        plain = store.commits - before
        before = store.commits
        await commit_simple(
            store, "t1", "turn-2", effects=[(effect("k1"), Provider().returning(1))]
        )
        one_effect = store.commits - before
        before = store.commits
        await commit_simple(store, "t1", "turn-2")  # a replay writes nothing
        assert store.commits == before
        await store.close()
        return plain, one_effect

    assert run(main()) == (1, 3)


def _take_over(path: Path, thread_id: str) -> None:
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute(
            "INSERT INTO ik_leases (thread_id, epoch) VALUES (?, 1)"
            " ON CONFLICT (thread_id) DO UPDATE SET epoch = epoch + 1",
            (thread_id,),
        )
    conn.close()


@pytest.mark.parametrize("earlier_turns", [0, 1])
def test_a_takeover_after_the_first_write_fences_the_rest_of_the_turn(
    tmp_path: Path, earlier_turns: int
) -> None:
    path = tmp_path / "f.db"

    async def main() -> None:
        store = await SQLiteDurability.open(path)
        if earlier_turns:
            await commit_simple(store, "t1", "turn-0")
        provider = Provider()

        async def operation(scope: TurnScope) -> None:
            await scope.run_effect(effect("k1"), provider.returning(1))  # bumps the epoch
            _take_over(path, "t1")
            await scope.run_effect(effect("k2"), provider.returning(2))

        with pytest.raises(LeaseLostError):
            await store.with_turn("t1", "turn-1", operation)
        assert provider.total() == 1
        assert await store.get_receipt("t1", "payments.charge:k2") is None
        assert await store.get_turn("t1", "turn-1") is None
        await store.close()

    run(main())


async def _open_and_close(path: Path) -> None:
    store = await SQLiteDurability.open(path)
    await store.close()
