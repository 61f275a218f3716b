"""Per-thread leases across processes: ``flock`` on one lock file per thread.

Why ``flock`` on separate files: the kernel releases the lock when the holder dies (kill -9
included), other threads' files are never touched, and a ``flock`` belongs to one open file
description, so two waiters in one process exclude each other too. The files live in a
directory apart from the database because closing *any* descriptor of the database file would
drop SQLite's own POSIX locks. Lock files are never deleted: unlinking a file another process
has open would let two holders lock two different files.

Waiting polls ``LOCK_NB`` with a short back-off so the event loop is never blocked. The epoch
(fencing token) is kept in the database by the adapter, bumped right after the file is locked.

Modes: a new lock directory is 0700 and lock files take the directory's read and write bits
(0600 in it), so another local user can neither list threads nor block one by holding a
``flock``. An operator who shares the store with a group creates the directory beforehand
(``mkdir -m 2770``): its lock files are then 0660.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ...contracts.errors import DurabilityError, ErrorCode
from ._errors import translate_errors
from ._location import require_directory

__all__ = ["LockFiles"]

_FIRST_POLL = 0.001
_MAX_POLL = 0.02


class LockFiles:
    """The lock directory: ``hold(thread_id)`` locks the thread's file for a block."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._ready = False
        self._file_mode = 0o600

    def ensure_directory(self) -> None:
        if not self._ready:
            require_directory(self.directory)
            with translate_errors(what="lock directory"):
                self.directory.mkdir(mode=0o700, exist_ok=True)
                self._file_mode = self.directory.stat().st_mode & 0o666
            self._ready = True

    def _open(self, path: Path) -> int:
        """The lock file's descriptor; a new file gets the directory's mode, whatever the
        umask (a group's members must be able to open it for writing)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, self._file_mode)
        except FileExistsError:
            return os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            os.fchmod(fd, self._file_mode)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def path_for(self, thread_id: str) -> Path:
        digest = hashlib.sha256(thread_id.encode("utf-8")).hexdigest()[:40]
        return self.directory / f"{digest}.lock"

    @asynccontextmanager
    async def hold(self, thread_id: str, wait: float) -> AsyncIterator[None]:
        path = self.path_for(thread_id)
        with translate_errors(what="lock file", thread_id=thread_id):
            fd = self._open(path)
        try:
            await self._wait(fd, thread_id, wait)
            yield
        finally:
            os.close(fd)  # closing the only descriptor releases the flock

    @staticmethod
    async def _wait(fd: int, thread_id: str, wait: float) -> None:
        deadline = time.monotonic() + wait
        delay = _FIRST_POLL
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            except OSError as exc:
                with translate_errors(what="lock file", thread_id=thread_id):
                    raise exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DurabilityError(
                    "timed out waiting for the thread lease",
                    code=ErrorCode.LOCK_TIMEOUT,
                    retryable=True,
                    context={"thread_id": thread_id, "timeout": wait},
                )
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, _MAX_POLL)
