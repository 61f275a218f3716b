"""Per-thread leases across processes: ``flock`` on one lock file per thread.

Why ``flock`` on separate files: the kernel releases the lock when the holder dies (kill -9
included), other threads' files are never touched, and a ``flock`` belongs to one open file
description, so two waiters in one process exclude each other too. The files live in a
directory apart from the database because closing *any* descriptor of the database file would
drop SQLite's own POSIX locks. Lock files are never deleted: unlinking a file another process
has open would let two holders lock two different files.

Waiting polls ``LOCK_NB`` with a short back-off so the event loop is never blocked. The epoch
(fencing token) is kept in the database by the adapter, bumped right after the file is locked.

Descriptors are kept open between turns (``take``/``give_back``): a released descriptor is
unlocked, then kept idle for the next turn on its thread, at most one per thread and
``IDLE_DESCRIPTORS`` in all. An idle descriptor is never locked, and two holders in one process
never share one (each takes its own), so they still exclude each other. The least recently
released one is closed first.

Modes: a new lock directory is 0700 and lock files take the directory's read and write bits
(0600 in it), so another local user can neither list threads nor block one by holding a
``flock``. An operator who shares the store with a group creates the directory beforehand
(``mkdir -m 2770``): its lock files are then 0660.
"""

from __future__ import annotations

import asyncio
import contextlib
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
IDLE_DESCRIPTORS = 256
"""Unlocked lock-file descriptors kept open for reuse (one per recently used thread)."""


class LockFiles:
    """The lock directory: ``hold(thread_id)`` locks the thread's file for a block."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._ready = False
        self._file_mode = 0o600
        self._idle: dict[str, int] = {}
        self._pid = os.getpid()

    def ensure_directory(self) -> bool:
        """Create the directory if need be; ``True`` when this call created it."""
        created = False
        if not self._ready:
            require_directory(self.directory)
            with translate_errors(what="lock directory"):
                try:
                    self.directory.mkdir(mode=0o700)
                    created = True
                except FileExistsError:
                    if not self.directory.is_dir():
                        raise
                self._file_mode = self.directory.stat().st_mode & 0o666
            self._ready = True
        return created

    def remove_directory(self) -> None:
        """Remove the directory ``ensure_directory`` just created, if it is still empty
        (the store it was for could not be opened)."""
        self.close()
        self._ready = False
        with contextlib.suppress(OSError):  # another process uses it already
            self.directory.rmdir()

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

    def take(self, thread_id: str) -> int:
        """An unlocked descriptor of the thread's lock file, for one holder."""
        if self._pid != os.getpid():  # a forked child: the parent's descriptors are not ours
            self._idle, self._pid = {}, os.getpid()
        fd = self._idle.pop(thread_id, None)
        if fd is not None:
            return fd
        with translate_errors(what="lock file", thread_id=thread_id):
            return self._open(self.path_for(thread_id))

    def give_back(self, thread_id: str, fd: int) -> None:
        """Release the lock (if held) and keep the descriptor for the thread's next turn."""
        idle = self._idle
        if thread_id in idle or self._pid != os.getpid():
            os.close(fd)  # closing the only descriptor releases the flock
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            os.close(fd)
            return
        while len(idle) >= IDLE_DESCRIPTORS and idle:
            os.close(idle.pop(next(iter(idle))))  # the least recently released thread's
        if IDLE_DESCRIPTORS > 0:
            idle[thread_id] = fd
        else:
            os.close(fd)

    def close(self) -> None:
        """Close the idle descriptors."""
        idle, self._idle = self._idle, {}
        for fd in idle.values():
            os.close(fd)

    @staticmethod
    def try_lock(fd: int, thread_id: str) -> bool:
        """Lock without waiting; ``False`` when another holder has it."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        except OSError as exc:
            with translate_errors(what="lock file", thread_id=thread_id):
                raise exc

    @asynccontextmanager
    async def hold(self, thread_id: str, wait: float) -> AsyncIterator[None]:
        fd = self.take(thread_id)
        try:
            await self.wait(fd, thread_id, wait)
            yield
        finally:
            self.give_back(thread_id, fd)

    @staticmethod
    async def wait(fd: int, thread_id: str, wait: float) -> None:
        """Lock, polling until ``wait`` seconds have passed (then ``LOCK_TIMEOUT``)."""
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
