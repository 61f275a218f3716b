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
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ...contracts.errors import ConfigurationError, DurabilityError, ErrorCode, StoreSchemaError
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


class _Job:
    """One function for the worker thread. ``claim`` decides, once, between the worker
    starting it and a cancelled caller dropping it; ``finished`` and the result are set on the
    event loop's thread (``_deliver``), so a caller never misses the end of a started job."""

    __slots__ = ("claim", "context", "ended", "finished", "fn", "future", "loop", "on_commit")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], Any],
        on_commit: Callable[[], None] | None,
        context: Any,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.fn = fn
        self.on_commit = on_commit
        self.context = context
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.claim = threading.Lock()
        self.finished = False
        self.ended: asyncio.Future[None] | None = None


def _deliver(job: _Job, result: Any, error: BaseException | None) -> None:
    """On the event loop's thread: the job ended; hand its outcome to whoever waits."""
    job.finished = True
    future = job.future
    if not future.done():
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    ended = job.ended
    if ended is not None and not ended.done():
        ended.set_result(None)


class Connection:
    """Runs functions against the connection on the worker thread (opened on first use).

    The worker is one thread fed by a queue; each job hands its outcome back to the event loop
    with ``call_soon_threadsafe``. (A ``ThreadPoolExecutor`` with ``wrap_future`` did the same
    with about three times the CPU per hand-off, and a turn makes two to four.)

    ``migrate``: bring the schema up to date when opening (else refuse one that is not)."""

    def __init__(self, path: Path, *, busy_timeout: float, migrate: bool = True) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.migrate = migrate
        self.commits = 0
        """Write transactions committed with changes (each is one WAL fsync)."""
        self._conn: sqlite3.Connection | None = None
        self._jobs: queue.SimpleQueue[tuple[_Job, bool] | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False

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

    def _ensure_worker(self) -> None:
        if self._closed:
            raise RuntimeError("the store's connection is closed")
        if self._worker is None:
            with self._start_lock:
                if self._worker is None:
                    # A daemon: a store left open does not hold the interpreter at exit; a
                    # transaction cut there is rolled back by SQLite, as after a crash.
                    worker = threading.Thread(target=self._work, name="ik-sqlite", daemon=True)
                    worker.start()
                    self._worker = worker

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
        self._ensure_worker()
        job = _Job(fn, on_commit, context, asyncio.get_running_loop())
        self._jobs.put((job, write))
        try:
            result: T = await job.future
            return result
        except asyncio.CancelledError:
            if job.claim.acquire(blocking=False):
                raise  # never started: the worker will skip it
            while not job.finished:  # started: wait for its end, through repeated cancels
                job.ended = job.loop.create_future()
                with contextlib.suppress(asyncio.CancelledError):
                    await job.ended
            raise

    def _work(self) -> None:
        """The worker thread: run jobs in order until ``None`` arrives."""
        jobs = self._jobs
        while True:
            item = jobs.get()
            if item is None:
                return
            job, write = item
            if not job.claim.acquire(blocking=False):
                continue  # its caller was cancelled before it started
            try:
                result = self._call(job.fn, write, job.on_commit, job.context)
            except BaseException as exc:
                outcome: tuple[Any, BaseException | None] = (None, exc)
            else:
                outcome = (result, None)
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                job.loop.call_soon_threadsafe(_deliver, job, *outcome)
            del job, item, outcome

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
        try:
            if self._worker is not None:
                await self._run(lambda conn: self._close_connection(), False, None, {})
            else:
                self._close_connection()
        finally:
            self._closed = True
            if self._worker is not None:
                self._jobs.put(None)

    def _close_connection(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with translate_errors(what="close"):
                conn.close()
