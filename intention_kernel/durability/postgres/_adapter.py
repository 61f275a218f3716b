"""``PostgresDurability``: the durability contract on PostgreSQL, for many workers on many
machines. Built on asyncpg; every statement is one short transaction (see ``_sql``)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import asyncpg

from ...contracts.codec import DEFAULT_LIMITS, JsonLimits
from ...contracts.errors import ConfigurationError, ErrorCode, StoreSchemaError
from ..store import DurableStore, check_settings
from . import _schema
from ._connection import PgConnection, init_connection
from ._errors import translated
from ._flow import PostgresFlow
from ._heads import HeadTexts
from ._inbox import PostgresInbox
from ._inbox_sql import InboxStatements
from ._inspect import PostgresInspection
from ._lease import LeaseSettings, PgLease
from ._notifier import PostgresNotifier
from ._outbox import PostgresOutbox
from ._outbox_sql import OutboxStatements
from ._reads import PostgresHistory
from ._schedules import PostgresSchedules
from ._sql import Statements
from ._turns import PostgresTurns

__all__ = ["PostgresDurability"]

log = logging.getLogger("intention_kernel.postgres")

APPLICATION_NAME = "intention_kernel"

HEAD_CACHE_BYTES = 32 * 2**20
"""Default memory for the threads' last committed result texts (see ``HeadTexts``): 32 MiB."""


async def _keep_session(conn: Any) -> None:
    """Pool reset hook: the adapter sets no session state (every setting is transaction-local),
    so asyncpg's default reset query - one more round trip per statement - is skipped."""


class _Opening:
    """``await PostgresDurability.open(...)`` or ``async with PostgresDurability.open(...)``."""

    def __init__(self, factory: Callable[[], Coroutine[Any, Any, PostgresDurability]]) -> None:
        self._factory = factory
        self._store: PostgresDurability | None = None

    def __await__(self) -> Generator[Any, None, PostgresDurability]:
        return self._factory().__await__()

    async def __aenter__(self) -> PostgresDurability:
        self._store = await self._factory()
        return self._store

    async def __aexit__(self, *exc: object) -> None:
        if self._store is not None:
            await self._store.close()


class PostgresDurability(DurableStore[PgLease]):
    """PostgreSQL durability: lease rows with fencing, one-statement commits.

    Open with ``PostgresDurability.open("postgresql://...")`` or ``open(pool)``; create the
    tables with ``setup()`` (or ``open(..., setup=True)``); ``open`` verifies the schema. It is
    a ``DurableStore`` over ``PostgresTurns``, ``PostgresHistory``, ``PostgresOutbox``,
    ``PostgresInspection`` and ``PostgresInbox``, sharing one ``PgConnection``, and a second one
    for reads when opened with ``read=`` (a hot standby: see ``_replica``).
    """

    telemetry_system: str | None = "postgresql"  # its OpenTelemetry db.system.name

    def __init__(
        self,
        pool: Any,
        *,
        schema: str = _schema.DEFAULT_SCHEMA,
        owns_pool: bool = False,
        lock_timeout: float = 30.0,
        lease_ttl: float = 10.0,
        heartbeat_interval: float | None = None,
        json_limits: JsonLimits = DEFAULT_LIMITS,
        statement_timeout: float | None = None,
        head_cache_bytes: int = HEAD_CACHE_BYTES,
        read_pool: Any = None,
        owns_read_pool: bool = False,
    ) -> None:
        lock_timeout, json_limits = check_settings(lock_timeout, json_limits)
        if (
            not isinstance(head_cache_bytes, int)
            or isinstance(head_cache_bytes, bool)
            or head_cache_bytes < 0
        ):
            raise ConfigurationError(
                "head_cache_bytes must be a whole number of bytes, 0 or more",
                context={"setting": "head_cache_bytes"},
            )
        self.head_cache_bytes = head_cache_bytes
        """Memory bound of the committed-text cache (0 turns it off)."""
        self.schema = _schema.check_schema_name(schema)
        self.lease_settings = LeaseSettings(lease_ttl, heartbeat_interval)
        if statement_timeout is None:
            statement_timeout = lock_timeout
        if (
            not isinstance(statement_timeout, int | float)
            or isinstance(statement_timeout, bool)
            or not 0 < statement_timeout <= 3600
        ):
            raise ConfigurationError(
                "statement_timeout must be a number of seconds in (0, 3600]",
                context={"setting": "statement_timeout"},
            )
        self.statement_timeout = float(statement_timeout)
        """Longest any statement (with its wait for a connection) may take."""
        self.server_synchronous_commit: str | None = None
        self.connection = PgConnection(
            pool, schema=self.schema, statement_timeout=self.statement_timeout, owns_pool=owns_pool
        )
        """The pool, lanes and statement budget the roles share."""
        self.reads = (
            self.connection
            if read_pool is None
            else PgConnection(
                read_pool,
                schema=self.schema,
                statement_timeout=self.statement_timeout,
                owns_pool=owns_read_pool,
            )
        )
        """Where replays and listings read: the read pool, else the primary's connection."""
        self.head_texts = HeadTexts(head_cache_bytes)
        """The committed-text cache of the turns and history roles."""
        db, reads, heads = self.connection, self.reads, self.head_texts
        sql = Statements.render(self.schema)
        outbox_sql, inbox_sql = OutboxStatements(self.schema), InboxStatements(self.schema)
        turns = PostgresTurns(
            db,
            sql,
            heads,
            lease_settings=self.lease_settings,
            lock_timeout=lock_timeout,
            json_limits=json_limits,
            reads=reads,
        )
        self._inbox_storage = PostgresInbox(db, inbox_sql, turns.handed, reads)
        super().__init__(
            turns,
            history=PostgresHistory(db, sql, heads, json_limits=json_limits, reads=reads),
            outbox=PostgresOutbox(db, outbox_sql),
            inspection=PostgresInspection(db, reads),
            inbox=self._inbox_storage,
            flow=PostgresFlow(db),
            schedules=PostgresSchedules(db),
            lock_timeout=lock_timeout,
            json_limits=json_limits,
        )
        self._notifier = PostgresNotifier(db, outbox_sql, inbox_sql, self.inbox)

    # ---------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        target: str | Any,
        *,
        schema: str = _schema.DEFAULT_SCHEMA,
        setup: bool = False,
        lock_timeout: float = 30.0,
        lease_ttl: float = 10.0,
        heartbeat_interval: float | None = None,
        json_limits: JsonLimits = DEFAULT_LIMITS,
        statement_timeout: float | None = None,
        head_cache_bytes: int = HEAD_CACHE_BYTES,
        min_size: int = 1,
        max_size: int = 10,
        statement_cache_size: int = 100,
        application_name: str = APPLICATION_NAME,
        listen: bool = False,
        read: str | Any | None = None,
    ) -> _Opening:
        """Open from a ``postgresql://`` URL (owning a new pool) or an existing asyncpg pool.

        ``statement_cache_size=0`` turns prepared statements off for old transaction-mode
        poolers (PgBouncer < 1.21 or without ``max_prepared_statements``). ``listen=True``
        (URL only) keeps one extra connection in ``LISTEN`` so relays wake on outbox commits,
        and workers and watchers on inbox changes, made in other processes (see
        ``set_outbox_notify``, ``set_inbox_notify``); it is refused behind a transaction-mode
        pooler.
        ``statement_timeout`` (default ``lock_timeout``) bounds every statement of a turn.
        ``read`` (a ``postgresql://`` URL, owning a pool of the same size, or a pool) is a hot
        standby's: a committed turn replays from it without a statement on the primary, and
        listings read it (see ``docs/scale-out.md``); its schema is verified at opening too.
        """

        async def pool_of(url: str) -> Any:
            with translated():
                return await asyncpg.create_pool(
                    url,
                    min_size=min_size,
                    max_size=max_size,
                    statement_cache_size=statement_cache_size,
                    server_settings={"application_name": application_name},
                    reset=_keep_session,
                    init=init_connection,
                )

        async def factory() -> PostgresDurability:
            owns, owns_read = isinstance(target, str), isinstance(read, str)
            for url, setting in ((target, "url"), (read, "read")):
                if isinstance(url, str) and not url.startswith(("postgresql://", "postgres://")):
                    raise ConfigurationError(
                        f"the {setting} URL must start with postgresql://",
                        context={"setting": setting},
                    )
            pool: Any = await pool_of(target) if owns else target
            try:
                read_pool: Any = await pool_of(read) if isinstance(read, str) else read
            except BaseException:
                if owns:
                    await pool.close()
                raise
            try:
                store = cls(
                    pool,
                    schema=schema,
                    owns_pool=owns,
                    lock_timeout=lock_timeout,
                    lease_ttl=lease_ttl,
                    heartbeat_interval=heartbeat_interval,
                    json_limits=json_limits,
                    statement_timeout=statement_timeout,
                    head_cache_bytes=head_cache_bytes,
                    read_pool=read_pool,
                    owns_read_pool=owns_read,
                )
            except BaseException:
                # Refused settings must not leak the pools we just opened.
                if owns:
                    await pool.close()
                if owns_read:
                    await read_pool.close()
                raise
            try:
                if setup:
                    await store.setup()
                await store.verify()
                await store._verify_reads(waited=setup)
                if listen:
                    if not owns:
                        raise ConfigurationError(
                            "listen=True needs a postgresql:// URL (it opens its own connection)",
                            context={"setting": "listen"},
                        )
                    await store._notifier.start_listener(target)
            except BaseException:
                await store.close()
                raise
            return store

        return _Opening(factory)

    async def setup(self) -> int:
        """Create or upgrade the tables (idempotent, serialized across processes)."""
        self._check_open()
        with translated():
            async with self.connection.lanes.connection() as conn:
                return await _schema.migrate(conn, self.schema)

    migrate = setup

    async def verify(self) -> int:
        """Refuse a missing or newer schema; note a server ``synchronous_commit`` default."""
        self._check_open()
        with translated():
            async with self.connection.lanes.connection() as conn:
                version = await _schema.verify(conn, self.schema)
                self.server_synchronous_commit = await conn.fetchval("SHOW synchronous_commit")
        if self.server_synchronous_commit in ("off", "local"):
            log.warning(
                "server synchronous_commit=%s: intention-kernel forces 'on' for its ledger "
                "writes and commits, but other writers on this server are not durable",
                self.server_synchronous_commit,
            )
        return version

    async def _verify_reads(self, *, waited: bool) -> None:
        """The read pool has the schema this code reads. Just after ``setup`` a standby may
        not have replayed the migration yet: it is given ``statement_timeout`` to."""
        if self.reads is self.connection:
            return
        deadline = asyncio.get_running_loop().time() + (self.statement_timeout if waited else 0)
        while True:
            try:
                with translated():
                    async with self.reads.lanes.connection() as conn:
                        await _schema.verify(conn, self.schema)
                return
            except StoreSchemaError as exc:
                if exc.code is not ErrorCode.STORE_SCHEMA_MISSING:
                    raise
                if asyncio.get_running_loop().time() >= deadline:
                    raise StoreSchemaError(
                        f"the read pool: {exc.message}", code=exc.code, context=exc.context
                    ) from None
            await asyncio.sleep(0.05)

    @property
    def pool(self) -> Any:
        """The asyncpg pool of the store, for tools that work on the same schema."""
        return self.connection.pool

    @property
    def commit_groups(self) -> Counter[int]:
        """Commit statements sent so far, by the number of turns each carried (group commit:
        1 is a commit alone; see ``_group``)."""
        turns = self.roles.turns
        assert isinstance(turns, PostgresTurns)
        return turns.group.sizes

    @property
    def acquire_groups(self) -> Counter[int]:
        """Lease acquire statements sent so far, by the number of acquisitions each carried
        (1 is an acquire alone; see ``_acquire``)."""
        turns = self.roles.turns
        assert isinstance(turns, PostgresTurns)
        return turns.acquires.sizes

    @property
    def submit_groups(self) -> Counter[int]:
        """Statements of submits that claim for a worker of this process, by the number of
        submits each carried (1 is a submit alone; see ``_inbox``)."""
        return self._inbox_storage.claiming.sizes

    # ---------------------------------------------------------------- notifications

    async def set_outbox_notify(self, enabled: bool) -> None:
        """Install (or drop) the trigger that NOTIFYs listening relays when a commit inserts
        outbox events. It adds work to every commit that writes events (see
        ``docs/postgres.md`` for the measured cost), so it is off unless turned on here."""
        self._check_open()
        await self._notifier.set_outbox_notify(enabled)

    async def outbox_notify_enabled(self) -> bool:
        self._check_open()
        return await self._notifier.outbox_notify_enabled()

    async def set_inbox_notify(self, enabled: bool) -> None:
        """Install (or drop) the triggers that NOTIFY listening workers and watchers (stores
        opened with ``listen=True``) of submits, finished requests and progress. A notifying
        commit serializes with the others at commit (see ``docs/postgres.md`` for the measured
        cost), so they are off unless turned on here."""
        self._check_open()
        await self._notifier.set_inbox_notify(enabled)

    async def inbox_notify_enabled(self) -> bool:
        self._check_open()
        return await self._notifier.inbox_notify_enabled()

    @property
    def listening(self) -> bool:
        """Whether the ``LISTEN`` connection of ``listen=True`` is open now (else relays,
        workers and watchers poll)."""
        return self._notifier.listening

    async def wait_for_events(self, max_wait: float) -> None:
        """Return on a notification (or one that came while the relay was busy) or after
        ``max_wait`` seconds. Without ``listen=True``, or while the LISTEN connection is down,
        this is a plain sleep: relays poll."""
        self._check_open()
        await self._notifier.wait_for_events(max_wait)

    async def close(self) -> None:
        """Stop listening, then release the pools; later calls raise ``SCOPE_CLOSED``."""
        if self.closed:
            return
        await self._notifier.stop_listener()
        try:
            await self._inbox_storage.close()  # submits in flight, before the pool goes
            await super().close()
        finally:
            if self.reads is not self.connection:
                await self.reads.close()
