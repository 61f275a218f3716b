"""The one place where ``sqlite3`` and file-system errors become our typed errors.

Every call into the driver runs inside ``translate_errors()``; the most specific SQLite result
code wins, and the driver exception stays on ``__cause__`` (never in the safe message).
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...contracts.errors import (
    CheckpointCorruptError,
    DurabilityError,
    ErrorCode,
    KernelError,
    StoreSchemaError,
)

__all__ = ["map_os_error", "map_sqlite_error", "translate_errors"]

# Primary result codes (the low byte of an extended code), from sqlite3.h.
SQLITE_PERM = 3
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_NOMEM = 7
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14
SQLITE_CONSTRAINT = 19
SQLITE_NOTADB = 26


def map_sqlite_error(exc: sqlite3.Error, **context: Any) -> KernelError:
    """The typed error for a driver error (table-tested in ``test_sqlite_errors.py``)."""
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    name: str | None = getattr(exc, "sqlite_errorname", None)
    details = {**context, "sqlite_error": name or type(exc).__name__}
    primary = None if code is None else code & 0xFF
    if primary in (SQLITE_BUSY, SQLITE_LOCKED):
        return DurabilityError(
            "the database is busy; retry the call",
            code=ErrorCode.STORE_BUSY,
            retryable=True,
            context=details,
        )
    if primary == SQLITE_FULL:
        return DurabilityError(
            "the database or its disk is full; nothing was written",
            code=ErrorCode.STORE_FULL,
            context=details,
        )
    if primary == SQLITE_READONLY:
        return DurabilityError(
            "the database is read-only; nothing was written",
            code=ErrorCode.STORE_READ_ONLY,
            context=details,
        )
    if primary == SQLITE_NOTADB:
        return StoreSchemaError(
            "the file is not an SQLite database (or it is encrypted)",
            code=ErrorCode.STORE_SCHEMA_MISSING,
            context=details,
        )
    if primary == SQLITE_CORRUPT:
        return CheckpointCorruptError(
            "the database file is corrupt; run PRAGMA integrity_check and restore from backup",
            context={"what": "database file", **details, "reason": "sqlite_corrupt"},
        )
    if primary in (SQLITE_CANTOPEN, SQLITE_IOERR, SQLITE_PERM, SQLITE_NOMEM):
        return DurabilityError(
            "the database cannot be opened, read or written",
            code=ErrorCode.STORE_UNAVAILABLE,
            context=details,
        )
    return DurabilityError("the database failed", code=ErrorCode.STORE_ERROR, context=details)


def map_os_error(exc: OSError, **context: Any) -> KernelError:
    """The typed error for a failure on our own files (the lock directory)."""
    details = {**context, "errno": errno.errorcode.get(exc.errno or 0, "unknown")}
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return DurabilityError(
            "the lock directory is read-only", code=ErrorCode.STORE_READ_ONLY, context=details
        )
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return DurabilityError(
            "the disk holding the lock directory is full",
            code=ErrorCode.STORE_FULL,
            context=details,
        )
    return DurabilityError(
        "the lock directory cannot be used", code=ErrorCode.STORE_UNAVAILABLE, context=details
    )


@contextmanager
def translate_errors(**context: Any) -> Iterator[None]:
    """Re-raise driver and OS errors as typed errors, chained to the original."""
    try:
        yield
    except sqlite3.Error as exc:
        raise map_sqlite_error(exc, **context) from exc
    except OSError as exc:
        raise map_os_error(exc, **context) from exc
