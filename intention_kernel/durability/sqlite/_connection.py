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
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ...contracts.errors import ConfigurationError, DurabilityError, ErrorCode, StoreSchemaError
from ._errors import SQLITE_BUSY, SQLITE_LOCKED, translate_errors
from ._jobs import MAX_GROUP, Job, hand_back, translated
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
        self.groups: Counter[int] = Counter()
        """Write transactions, by the number of write jobs each carried (group commit)."""
        self._conn: sqlite3.Connection | None = None
        self._jobs: queue.SimpleQueue[tuple[Job, bool] | None] = queue.SimpleQueue()
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
        job = Job(fn, on_commit, context, asyncio.get_running_loop())
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
        """The worker thread: run jobs in order until ``None`` arrives. Write jobs queued
        together run as one group (``_group``); a read ends the group and runs after it."""
        jobs = self._jobs
        carried: list[tuple[Job, bool] | None] = []  # taken from the queue, not run yet
        while True:
            item = carried.pop() if carried else jobs.get()
            if item is None:
                return
            job, write = item
            group = [job]
            while write and len(group) < MAX_GROUP:
                try:
                    queued = jobs.get_nowait()
                except queue.Empty:
                    break
                if queued is None or not queued[1]:
                    carried.append(queued)  # the end, or a read: after the group committed
                    break
                group.append(queued[0])
            if len(group) > 1:
                self._group(group)
            else:
                self._one(job, write)
            del job, item, group

    def _one(self, job: Job, write: bool) -> None:
        if not job.claim.acquire(blocking=False):
            return  # its caller was cancelled before it started
        if write:
            self.groups[1] += 1
        try:
            result = self._call(job.fn, write, job.on_commit, job.context)
        except BaseException as exc:
            hand_back(job, None, exc)
        else:
            hand_back(job, result, None)

    def _group(self, group: list[Job]) -> None:
        """Group commit: write jobs that were queued together run in one ``BEGIN IMMEDIATE``
        transaction, one fsync for all. Each runs in its own savepoint, so one that raises is
        rolled back alone and gets its own error; every outcome is handed back only after
        ``COMMIT``. A group that cannot start (the write lock not granted in time) runs its
        jobs one by one; a ``COMMIT`` that fails fails every job of the group (nothing of it
        was written)."""
        try:
            with translate_errors(**group[0].context):
                conn = self._open()
                conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            for job in group:
                self._one(job, True)
            return
        before = conn.total_changes
        ran: list[tuple[Job, Any, BaseException | None]] = []
        try:
            for job in group:
                if not job.claim.acquire(blocking=False):
                    continue
                ran.append((job, None, None))
                conn.execute("SAVEPOINT ik_job")
                try:
                    with translate_errors(**job.context):
                        ran[-1] = (job, job.fn(conn), None)
                except Exception as exc:
                    ran[-1] = (job, None, exc)
                    conn.execute("ROLLBACK TO ik_job")
                conn.execute("RELEASE ik_job")
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # the original error matters
                    conn.execute("ROLLBACK")
            for job, _, _ in ran:
                hand_back(job, None, translated(exc, job.context))
            return
        self.groups[len(ran)] += 1
        if conn.total_changes != before:
            self.commits += 1
        for job, result, error in ran:
            if error is None and job.on_commit is not None:
                try:
                    job.on_commit()
                except BaseException as exc:
                    error = exc
            hand_back(job, result, error)

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = _connect(self.path, self.busy_timeout, self.migrate)
        return self._conn

    def _call(
        self,
        fn: Callable[[sqlite3.Connection], T],
        write: bool,
        on_commit: Callable[[], None] | None,
        context: Any,
    ) -> T:
        with translate_errors(**context):
            conn = self._open()
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
