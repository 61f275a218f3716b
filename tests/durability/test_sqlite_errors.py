"""The sqlite3 -> typed error mapping, row by row, plus real BUSY and not-a-database cases."""

from __future__ import annotations

import asyncio
import errno
import sqlite3
from pathlib import Path

import pytest

from intention_kernel.contracts import (
    CheckpointCorruptError,
    DurabilityError,
    ErrorCode,
    KernelError,
    StoreSchemaError,
)
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.durability.sqlite._errors import (
    map_os_error,
    map_sqlite_error,
    translate_errors,
)
from intention_kernel.testing.conformance import commit_simple


def _driver_error(cls: type[sqlite3.Error], code: int, name: str) -> sqlite3.Error:
    exc = cls("driver text that must not leak")
    exc.sqlite_errorcode = code
    exc.sqlite_errorname = name
    return exc


Op, Db, Dur, E = sqlite3.OperationalError, sqlite3.DatabaseError, DurabilityError, ErrorCode

SQLITE_ROWS = [
    (Op, 5, "SQLITE_BUSY", Dur, E.STORE_BUSY, True),
    (Op, 517, "SQLITE_BUSY_SNAPSHOT", Dur, E.STORE_BUSY, True),
    (Op, 6, "SQLITE_LOCKED", Dur, E.STORE_BUSY, True),
    (Op, 13, "SQLITE_FULL", Dur, E.STORE_FULL, False),
    (Op, 8, "SQLITE_READONLY", Dur, E.STORE_READ_ONLY, False),
    (Op, 1032, "SQLITE_READONLY_DBMOVED", Dur, E.STORE_READ_ONLY, False),
    (Db, 26, "SQLITE_NOTADB", StoreSchemaError, E.STORE_SCHEMA_MISSING, False),
    (Db, 11, "SQLITE_CORRUPT", CheckpointCorruptError, E.CHECKPOINT_CORRUPT, False),
    (Op, 14, "SQLITE_CANTOPEN", Dur, E.STORE_UNAVAILABLE, False),
    (Op, 778, "SQLITE_IOERR_WRITE", Dur, E.STORE_UNAVAILABLE, False),
    (Op, 3, "SQLITE_PERM", Dur, E.STORE_UNAVAILABLE, False),
    (sqlite3.IntegrityError, 2067, "SQLITE_CONSTRAINT_UNIQUE", Dur, E.STORE_ERROR, False),
    (Op, 1, "SQLITE_ERROR", Dur, E.STORE_ERROR, False),
]


@pytest.mark.parametrize(("cls", "code", "name", "typed", "expected", "retryable"), SQLITE_ROWS)
def test_sqlite_error_is_mapped_to_a_typed_error(
    cls: type[sqlite3.Error],
    code: int,
    name: str,
    typed: type[KernelError],
    expected: ErrorCode,
    retryable: bool,
) -> None:
    driver = _driver_error(cls, code, name)
    with pytest.raises(typed) as caught, translate_errors(what="test"):
        raise driver
    assert caught.value.code == expected
    assert caught.value.retryable is retryable
    assert caught.value.__cause__ is driver
    assert "driver text" not in caught.value.message
    assert caught.value.context["sqlite_error"] == name
    assert caught.value.context["what"] == "test"


def test_errors_without_a_result_code_are_store_errors() -> None:
    mapped = map_sqlite_error(sqlite3.ProgrammingError("closed"))
    assert type(mapped) is DurabilityError and mapped.code == ErrorCode.STORE_ERROR


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        (errno.EROFS, ErrorCode.STORE_READ_ONLY),
        (errno.EACCES, ErrorCode.STORE_READ_ONLY),
        (errno.ENOSPC, ErrorCode.STORE_FULL),
        (errno.EDQUOT, ErrorCode.STORE_FULL),
        (errno.EIO, ErrorCode.STORE_UNAVAILABLE),
    ],
)
def test_os_errors_on_lock_files_are_mapped(number: int, expected: ErrorCode) -> None:
    mapped = map_os_error(OSError(number, "text"))
    assert isinstance(mapped, DurabilityError) and mapped.code == expected


def test_a_real_busy_database_gives_a_retryable_store_busy(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"

    async def main() -> None:
        store = await SQLiteDurability.open(path, busy_timeout=0.1)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(DurabilityError) as caught:
                await commit_simple(store, "t1", "turn-1")
            assert caught.value.code == ErrorCode.STORE_BUSY and caught.value.retryable
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        result, _, replayed = await commit_simple(store, "t1", "turn-1")
        assert not replayed and result.checkpoint.revision == 1
        await store.close()

    asyncio.run(main())
