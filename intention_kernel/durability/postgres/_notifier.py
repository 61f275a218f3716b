"""``PostgresNotifier``: the optional ``LISTEN``/``NOTIFY`` wake-up of relays.

Wake-up (optional, off by default): ``set_outbox_notify(True)`` installs a statement trigger
that sends ``NOTIFY`` when a commit inserts outbox rows; a store opened with ``listen=True``
keeps one dedicated connection (outside the pool) in ``LISTEN`` and ``wait_for_events`` returns
early on a notification. Both are hints: relays keep polling, and a missed notification only
costs one poll interval. ``LISTEN`` is refused behind a transaction-mode pooler (PgBouncer),
detected by a notification that never comes back at start.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

import asyncpg

from ...contracts.errors import ConfigurationError, ErrorCode
from ._connection import PgConnection
from ._outbox_sql import OutboxStatements, notify_channel

__all__ = ["PostgresNotifier"]

log = logging.getLogger("intention_kernel.postgres")

_PROBE_TIMEOUT = 2.0
_RECONNECT_EVERY = 5.0


class PostgresNotifier:
    """``OutboxNotifier``: the optional ``LISTEN`` wake-up of relays (the facade checks that
    the store is open)."""

    def __init__(self, db: PgConnection, sql: OutboxStatements) -> None:
        self._db = db
        self._outbox_sql = sql
        self.schema = db.schema
        self._listen_dsn: str | None = None
        self._listener: Any = None
        self._notified: asyncio.Event | None = None
        self._reconnect_at = 0.0

    async def set_outbox_notify(self, enabled: bool) -> None:
        """Install (or drop) the trigger that NOTIFYs listening relays when a commit inserts
        outbox events. It adds work to every commit that writes events (see
        ``docs/postgres.md`` for the measured cost), so it is off unless turned on here."""
        sql = self._outbox_sql.notify_on if enabled else self._outbox_sql.notify_off
        await self._db.execute(sql)

    async def outbox_notify_enabled(self) -> bool:
        row = await self._db.fetchrow(self._outbox_sql.notify_state)
        return bool(row[0])

    async def start_listener(self, dsn: str) -> None:
        """Open the dedicated LISTEN connection and check that a notification comes back; a
        transaction-mode pooler would lose it, so such a setup is refused at start."""
        self._listen_dsn = dsn
        if not await self._open_listener():
            raise ConfigurationError(
                "LISTEN does not work through this connection (a transaction-mode pooler such"
                " as PgBouncer?): open without listen=True, relays then poll",
                code=ErrorCode.INVALID_CONFIGURATION,
                context={"setting": "listen"},
            )

    async def _open_listener(self) -> bool:
        """Connect, LISTEN, and send a probe through the pool; False if it never arrives."""
        assert self._listen_dsn is not None
        channel = notify_channel(self.schema)
        event = asyncio.Event()
        token = f"probe-{secrets.token_hex(8)}"
        probe = asyncio.Event()

        def heard(conn: Any, pid: int, name: str, payload: str) -> None:
            if payload == token:
                probe.set()
            else:
                event.set()

        conn = await asyncpg.connect(self._listen_dsn, statement_cache_size=0, timeout=5)
        try:
            await conn.add_listener(channel, heard)
            await self._db.execute("SELECT pg_notify($1, $2)", channel, token)
            await asyncio.wait_for(probe.wait(), _PROBE_TIMEOUT)
        except TimeoutError:
            await conn.close()
            return False
        except BaseException:
            await conn.close()
            raise
        event.set()  # events may have committed while no connection listened
        self._listener, self._notified = conn, event
        return True

    async def wait_for_events(self, max_wait: float) -> None:
        """Return on a notification (or one that came while the relay was busy) or after
        ``max_wait`` seconds. Without ``listen=True``, or while the LISTEN connection is down,
        this is a plain sleep: relays poll."""
        if self._listen_dsn is None:
            await asyncio.sleep(max_wait)
            return
        loop = asyncio.get_running_loop()
        if (self._listener is None or self._listener.is_closed()) and loop.time() >= (
            self._reconnect_at
        ):
            self._reconnect_at = loop.time() + _RECONNECT_EVERY
            await self.stop_listener(keep_dsn=True)
            try:
                await self._open_listener()
            except Exception as exc:  # keep polling; try again later
                log.warning("outbox LISTEN connection not reopened: %r", exc)
        event = self._notified
        if event is None or self._listener is None or self._listener.is_closed():
            await asyncio.sleep(max_wait)
            return
        if not event.is_set():
            try:
                await asyncio.wait_for(event.wait(), max_wait)
            except TimeoutError:
                return
        event.clear()

    async def stop_listener(self, *, keep_dsn: bool = False) -> None:
        conn, self._listener, self._notified = self._listener, None, None
        if not keep_dsn:
            self._listen_dsn = None
        if conn is not None and not conn.is_closed():
            await conn.close()
