"""The adapter's connection: one ``sqlite3`` connection owned by one worker thread.

``sqlite3`` calls block and a connection must stay on the thread that made it, so every
statement runs on a dedicated single-thread executor and the event loop only awaits it.
Connections use ``isolation_level=None``: no implicit ``BEGIN``; every read-modify-write is an
explicit ``BEGIN IMMEDIATE`` (a deferred transaction that upgrades to a write gets
``SQLITE_BUSY_SNAPSHOT``, which no busy timeout can wait out). WAL and ``synchronous=FULL``
make each commit durable against power loss, not only against a process crash.

A new database file is made private (0600) before SQLite writes anything: it holds every
message, receipt value and event, and SQLite gives ``-wal`` and ``-shm`` the mode of the
database file. With ``migrate=False`` (operator commands other than ``migrate``) a missing file,
or a schema that is missing or older, is refused before anything is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ...contracts.errors import ConfigurationError, DurabilityError, ErrorCode, StoreSchemaError
from .._settle import settle
from ._errors import SQLITE_BUSY, SQLITE_LOCKED, translate_errors
from ._location import require_directory
from ._schema import SCHEMA_VERSION, migrate, stored_version

__all__ = ["Connection"]

T = TypeVar("T")


def _read_only_location(path: Path) -> bool:
    try:
        return bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


FILE_MODE = 0o600
"""A new database file: readable and writable by its owner only (see ``docs/sqlite.md`` for
sharing one with a group)."""


def _missing_schema(message: str, found: int) -> StoreSchemaError:
    return StoreSchemaError(
        f"{message}: run the migration first (intention-kernel migrate)",
        code=ErrorCode.STORE_SCHEMA_MISSING,
        context={"found": found, "expected": SCHEMA_VERSION},
    )


def _require_current(conn: sqlite3.Connection) -> None:
    """Refuse a schema other than this code's, reading only."""
    version = stored_version(conn)
    if version > SCHEMA_VERSION:
        raise StoreSchemaError(
            "the database was written by a newer version of intention-kernel",
            code=ErrorCode.STORE_SCHEMA_TOO_NEW,
            context={"found": version, "supported": SCHEMA_VERSION},
        )
    if version < SCHEMA_VERSION:
        what = "the file has no store schema" if version == 0 else "the store schema is older"
        raise _missing_schema(what, version)


def _connect(path: Path, busy_timeout: float, allow_migrate: bool) -> sqlite3.Connection:
    created = not path.exists()
    if created and not allow_migrate:
        raise _missing_schema("there is no database file at this path", 0)
    if created:
        require_directory(path)
    try:
        conn = sqlite3.connect(
            str(path), timeout=busy_timeout, isolation_level=None, check_same_thread=True
        )
        if created:  # opened, nothing written yet: -wal and -shm will take this mode
            try:
                os.chmod(path, FILE_MODE)
            except BaseException:
                conn.close()
                raise
        return _configure(conn, busy_timeout, allow_migrate)
    except sqlite3.OperationalError as exc:
        # WAL needs the -shm file next to the database: on a read-only filesystem SQLite only
        # says "unable to open", so name the real cause.
        if _read_only_location(path):
            raise DurabilityError(
                "the database is on a read-only filesystem",
                code=ErrorCode.STORE_READ_ONLY,
                context={"what": "open"},
            ) from exc
        raise


def _switch_to_wal(conn: sqlite3.Connection, busy_timeout: float) -> str:
    """Set WAL mode. Switching a new file needs an exclusive lock, and SQLite reports
    ``SQLITE_BUSY`` at once (without its busy handler) while another process opens the same new
    file, so retry here within the busy timeout."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.002
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
                return "wal"
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF in (SQLITE_BUSY, SQLITE_LOCKED)
            if not busy or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _configure(
    conn: sqlite3.Connection, busy_timeout: float, allow_migrate: bool
) -> sqlite3.Connection:
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if not allow_migrate:
            _require_current(conn)  # before switching to WAL, which writes an empty file
        mode = _switch_to_wal(conn, busy_timeout)
        if mode != "wal":
            raise ConfigurationError(
                "the database could not be switched to WAL mode",
                context={"setting": "journal_mode", "found": str(mode)},
            )
        conn.execute("PRAGMA synchronous = FULL")
        if allow_migrate:
            migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


class Connection:
    """Runs functions against the connection on the worker thread (opened on first use).

    ``migrate``: bring the schema up to date when opening (else refuse one that is not)."""

    def __init__(self, path: Path, *, busy_timeout: float, migrate: bool = True) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.migrate = migrate
        self.commits = 0
        """Write transactions committed with changes (each is one WAL fsync)."""
        self._conn: sqlite3.Connection | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ik-sqlite")

    async def read(self, fn: Callable[[sqlite3.Connection], T], **context: Any) -> T:
        """Run ``fn`` in autocommit mode (each statement sees the latest commit)."""
        return await self._run(fn, False, None, context)

    async def write(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        on_commit: Callable[[], None] | None = None,
        **context: Any,
    ) -> T:
        """Run ``fn`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT``; roll back if it raises.

        ``on_commit`` runs on the worker thread right after ``COMMIT`` succeeded, before the
        next job starts: bookkeeping that must follow the commit even if the caller is
        cancelled meanwhile (the lease's epoch, for one).
        """
        return await self._run(fn, True, on_commit, context)

    async def _run(
        self,
        fn: Callable[[sqlite3.Connection], T],
        write: bool,
        on_commit: Callable[[], None] | None,
        context: Any,
    ) -> T:
        """Submit one job; if the caller is cancelled, the job is dropped when it has not
        started, else waited for to its end (a ``COMMIT`` on the worker thread cannot be
        interrupted, and the lease it is fenced by must not be released before it ends)."""
        job = self._executor.submit(self._call, fn, write, on_commit, context)
        try:
            return await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            if job.cancel():
                raise  # never started: nothing ran
            with contextlib.suppress(Exception):
                await settle(asyncio.wrap_future(job))
            raise

    def _call(
        self,
        fn: Callable[[sqlite3.Connection], T],
        write: bool,
        on_commit: Callable[[], None] | None,
        context: Any,
    ) -> T:
        with translate_errors(**context):
            if self._conn is None:
                self._conn = _connect(self.path, self.busy_timeout, self.migrate)
            conn = self._conn
            if not write:
                return fn(conn)
            before = conn.total_changes
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    # The original error matters; SQLite also rolls back on close.
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
            if conn.total_changes != before:
                self.commits += 1
            if on_commit is not None:
                on_commit()
            return result

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._close_connection)
        finally:
            self._executor.shutdown(wait=False)

    def _close_connection(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with translate_errors(what="close"):
                conn.close()
