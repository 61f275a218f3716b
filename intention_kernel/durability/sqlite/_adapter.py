"""``SQLiteDurability``: the embedded durable store, safe across processes on one machine.

Each role member is one short transaction on the worker thread; none stays open while an
operation runs. The thread lease is a ``flock`` (see ``_lease``) plus an epoch row (fencing).
Acquiring only reads the epoch ``E``; the turn's first write transaction moves it from ``E`` to
``E + 1`` (compare-and-set) and later writes check ``E + 1``, all inside their own
``BEGIN IMMEDIATE`` transaction. So a turn without effects costs one durable commit, and of two
holders (a takeover) only the first to write gets on; the other gets ``LeaseLostError``.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from ...contracts.codec import DEFAULT_LIMITS, JsonLimits
from ...contracts.errors import ConfigurationError
from .._documents import OwnTexts
from ..store import DurableStore, check_settings
from ._connection import Connection
from ._flow import SQLiteFlow
from ._history import SQLiteHistory
from ._inbox import SQLiteInbox
from ._inspect import SQLiteInspection
from ._lease import LockFiles
from ._location import check_local, parse_location
from ._outbox import SQLiteOutbox
from ._schedules import SQLiteSchedules
from ._turns import SQLiteLease, SQLiteTurns

__all__ = ["SQLiteDurability"]

HEAD_CACHE_BYTES = 32 * 2**20
"""Memory for the threads' last committed result texts (see ``OwnTexts``): 32 MiB."""


class SQLiteDurability(DurableStore[SQLiteLease]):
    """Durable turns in one SQLite file, shared safely by the processes of one machine, and an
    ``OutboxSource`` for relays (see ``_outbox``), a ``StoreInspector`` (see ``_inspect``) and a
    turn inbox (``store.inbox``, see ``_inbox``). It is a ``DurableStore`` over five roles
    sharing one connection: ``SQLiteTurns``, ``SQLiteHistory``, ``SQLiteOutbox``,
    ``SQLiteInspection`` and ``SQLiteInbox``.

    ``location`` is a path or a ``sqlite:///`` URL (``sqlite:////abs/path.db``). ``lock_dir``
    holds one lock file per thread (default: ``<database>.locks`` next to the file); every
    process using the database must use the same one. ``busy_timeout`` bounds how long a
    transaction waits for SQLite's write lock before ``STORE_BUSY``. Use ``await
    SQLiteDurability.open(...)`` to surface schema and file errors at start.
    """

    telemetry_system: str | None = "sqlite"  # its OpenTelemetry db.system.name

    def __init__(
        self,
        location: str | os.PathLike[str],
        *,
        lock_timeout: float = 30.0,
        busy_timeout: float = 5.0,
        lock_dir: str | os.PathLike[str] | None = None,
        json_limits: JsonLimits = DEFAULT_LIMITS,
    ) -> None:
        lock_timeout, json_limits = check_settings(lock_timeout, json_limits)
        if not isinstance(busy_timeout, int | float) or not 0 < busy_timeout <= 600:
            raise ConfigurationError(
                "busy_timeout must be a number of seconds in (0, 600]",
                context={"setting": "busy_timeout"},
            )
        self.path = parse_location(location)
        locks = Path(lock_dir).absolute() if lock_dir is not None else None
        self._locks = LockFiles(locks or self.path.with_name(self.path.name + ".locks"))
        check_local(self.path)
        check_local(self._locks.directory)
        self._db = Connection(self.path, busy_timeout=float(busy_timeout))
        self._own = OwnTexts(HEAD_CACHE_BYTES)
        db, own, files = self._db, self._own, self._locks
        super().__init__(
            SQLiteTurns(db, files, own, lock_timeout=lock_timeout, json_limits=json_limits),
            history=SQLiteHistory(db, files, own, json_limits=json_limits),
            outbox=SQLiteOutbox(db),
            inspection=SQLiteInspection(db, files),
            inbox=SQLiteInbox(db),
            flow=SQLiteFlow(db),
            schedules=SQLiteSchedules(db),
            lock_timeout=lock_timeout,
            json_limits=json_limits,
        )

    @classmethod
    async def open(
        cls, location: str | os.PathLike[str], *, migrate: bool = True, **options: Any
    ) -> SQLiteDurability:
        """Create the adapter, open the file and bring its schema up to date. With
        ``migrate=False`` a missing file or a missing or older schema is refused
        (``STORE_SCHEMA_MISSING``) and nothing is created or changed."""
        store = cls(location, **options)
        try:
            await store.setup(migrate=migrate)
        except BaseException:
            await store.close()
            raise
        return store

    async def setup(self, *, migrate: bool = True) -> None:
        """Open the database and apply pending migrations (otherwise done on first use);
        ``migrate=False`` refuses a schema that is not current instead."""
        if not migrate:
            self._db.migrate = False
            await self._db.read(lambda conn: None, what="open")
            return
        created = self._locks.ensure_directory()
        try:
            await self._db.read(lambda conn: None, what="open")
        except BaseException:
            if created:  # not a database (or unreadable): leave the directory as it was
                self._locks.remove_directory()
            raise

    @property
    def commits(self) -> int:
        """Write transactions this instance committed (a diagnostic for benchmarks)."""
        return self._db.commits

    @property
    def commit_groups(self) -> Counter[int]:
        """Write transactions so far, by the number of writes each carried (group commit: 1
        is a write alone; see ``_connection``)."""
        return self._db.groups
