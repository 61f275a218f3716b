"""``PostgresNotifier``: the optional ``LISTEN``/``NOTIFY`` wake-ups of relays, workers and
watchers in other processes.

Two switches, both off by default (each adds work to commits, see ``docs/postgres.md``):
``set_outbox_notify(True)`` installs a statement trigger that notifies the schema's outbox
channel when a commit inserts outbox rows; ``set_inbox_notify(True)`` installs row triggers that
notify its inbox channel when a request is submitted, due again or finished, or a progress entry
is written. A store opened with ``listen=True`` keeps one dedicated connection (outside the pool)
in ``LISTEN`` on both channels: ``wait_for_events`` returns early on an outbox notification, and
an inbox one fires the ``Inbox`` facade's wake-ups, so this process's workers and watchers wake
on another process's write. All are hints: relays, workers and watchers keep polling, and a
missed notification costs one poll interval. ``LISTEN`` is refused behind a transaction-mode
pooler (PgBouncer), detected by a probe notification that never comes back at start. A lost
connection is reopened in the background (at once, then every 5 s) and, once back, wakes
everyone (notifications sent meanwhile were lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Any

import asyncpg

from ...contracts.errors import ConfigurationError, DurabilityError, ErrorCode
from .._inbox import Inbox
from ._connection import PgConnection
from ._errors import translated
from ._inbox_sql import INBOX_NOTIFY_KINDS, InboxStatements
from ._outbox_sql import OutboxStatements, notify_channel

__all__ = ["PostgresNotifier"]

log = logging.getLogger("intention_kernel.postgres")

_PROBE_TIMEOUT = 2.0
_RECONNECT_EVERY = 5.0


class PostgresNotifier:
    """``OutboxNotifier`` and the inbox's cross-process wake-up: one ``LISTEN`` connection for
    both channels (the facade checks that the store is open)."""

    def __init__(
        self,
        db: PgConnection,
        outbox_sql: OutboxStatements,
        inbox_sql: InboxStatements,
        inbox: Inbox,
    ) -> None:
        self._db = db
        self._outbox_sql = outbox_sql
        self._inbox_sql = inbox_sql
        self._inbox = inbox
        self.schema = db.schema
        self._outbox_channel = notify_channel(self.schema)
        self._inbox_channel = notify_channel(self.schema, "inbox")
        self._listen_dsn: str | None = None
        self._listener: Any = None
        self._events: asyncio.Event | None = None
        self._reopening: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- switches

    async def set_outbox_notify(self, enabled: bool) -> None:
        """Install (or drop) the trigger that NOTIFYs listening relays when a commit inserts
        outbox events. It adds work to every commit that writes events (see
        ``docs/postgres.md`` for the measured cost), so it is off unless turned on here."""
        sql = self._outbox_sql.notify_on if enabled else self._outbox_sql.notify_off
        await self._db.execute(sql)

    async def outbox_notify_enabled(self) -> bool:
        row = await self._db.fetchrow(self._outbox_sql.notify_state)
        return bool(row[0])

    async def set_inbox_notify(self, enabled: bool) -> None:
        """Install (or drop) the triggers that NOTIFY listening workers and watchers of inbox
        changes. A notifying commit serializes with the others at commit (see
        ``docs/postgres.md`` for the measured cost), so they are off unless turned on here."""
        sql = self._inbox_sql.notify_on if enabled else self._inbox_sql.notify_off
        await self._db.execute(sql)

    async def inbox_notify_enabled(self) -> bool:
        row = await self._db.fetchrow(self._inbox_sql.notify_state)
        return bool(row[0])

    # ---------------------------------------------------------------- listening

    async def start_listener(self, dsn: str) -> None:
        """Open the dedicated LISTEN connection and check that a notification comes back; a
        transaction-mode pooler would lose it, so such a setup is refused at start."""
        self._listen_dsn, self._events = dsn, asyncio.Event()
        try:
            with translated():
                opened = await self._open_listener()
        except DurabilityError as exc:
            self._listen_dsn = None
            if exc.code is not ErrorCode.STORE_READ_ONLY:
                raise
            raise DurabilityError(
                "LISTEN needs the primary (this server is a standby): open without"
                " listen=True; workers and watchers then poll",
                code=ErrorCode.STORE_READ_ONLY,
                context={"setting": "listen"},
            ) from exc
        if not opened:
            self._listen_dsn = None
            raise ConfigurationError(
                "LISTEN does not work through this connection (a transaction-mode pooler such"
                " as PgBouncer?): open without listen=True; relays, workers and watchers then"
                " poll",
                code=ErrorCode.INVALID_CONFIGURATION,
                context={"setting": "listen"},
            )

    async def _open_listener(self) -> bool:
        """Connect, LISTEN, and send a probe through the pool; False if it never arrives."""
        assert self._listen_dsn is not None
        token = f"probe-{secrets.token_hex(8)}"
        probe = asyncio.Event()

        def heard(conn: Any, pid: int, channel: str, payload: str) -> None:
            if channel == self._inbox_channel:
                self._heard_inbox(payload)
            elif payload == token:
                probe.set()
            elif self._events is not None:
                self._events.set()

        conn = await asyncpg.connect(self._listen_dsn, statement_cache_size=0, timeout=5)
        try:
            for channel in (self._outbox_channel, self._inbox_channel):
                await conn.add_listener(channel, heard)
            await self._db.execute("SELECT pg_notify($1, $2)", self._outbox_channel, token)
            await asyncio.wait_for(probe.wait(), _PROBE_TIMEOUT)
        except TimeoutError:
            await conn.close()
            return False
        except BaseException:
            await conn.close()
            raise
        conn.add_termination_listener(self._lost)
        self._listener = conn
        self._wake_all()  # writes may have committed while no connection listened
        return True

    def _heard_inbox(self, payload: str) -> None:
        """Fire what the notification's kind wakes (an unknown kind wakes both)."""
        workers, watchers = INBOX_NOTIFY_KINDS.get(payload.split("\n", 1)[0], (True, True))
        self._inbox.wake(workers=workers, watchers=watchers)

    def _wake_all(self) -> None:
        if self._events is not None:
            self._events.set()
        self._inbox.wake(workers=True, watchers=True)

    def _lost(self, conn: Any) -> None:
        """The LISTEN connection closed under us: everyone polls until it is reopened."""
        if conn is not self._listener or self._listen_dsn is None:
            return
        self._listener = None
        log.warning("the LISTEN connection was lost; reopening it")
        self._reopening = asyncio.get_running_loop().create_task(self._reopen())

    async def _reopen(self) -> None:
        while self._listen_dsn is not None:
            try:
                if await self._open_listener():
                    return
                log.warning("LISTEN reopened, but its probe notification did not come back")
            except Exception as exc:  # keep polling; try again later
                log.warning("LISTEN connection not reopened: %r", exc)
            await asyncio.sleep(_RECONNECT_EVERY)

    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is open now (else everyone polls)."""
        return self._listener is not None and not self._listener.is_closed()

    async def wait_for_events(self, max_wait: float) -> None:
        """Return on an outbox notification (or one that came while the relay was busy) or
        after ``max_wait`` seconds. Without ``listen=True``, or while the LISTEN connection is
        down, this is a plain sleep: relays poll."""
        events = self._events
        if events is None or not self.listening:
            await asyncio.sleep(max_wait)
            return
        if not events.is_set():
            try:
                await asyncio.wait_for(events.wait(), max_wait)
            except TimeoutError:
                return
        events.clear()

    async def stop_listener(self) -> None:
        self._listen_dsn = None
        task, self._reopening = self._reopening, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        conn, self._listener = self._listener, None
        if conn is not None and not conn.is_closed():
            await conn.close()
