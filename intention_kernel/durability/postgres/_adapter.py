"""``PostgresDurability``: the durability contract on PostgreSQL, for many workers on many
machines. Built on asyncpg; every statement is one short transaction (see ``_sql``)."""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import asyncpg

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.codec import DEFAULT_LIMITS, JsonLimits
from ...contracts.errors import (
    ConfigurationError,
    DurabilityError,
    ErrorCode,
    KernelError,
    LeaseLostError,
    TurnConflictError,
)
from ...contracts.receipts import EffectIdentity, EffectReceipt, ReceiptStatus
from ...contracts.turns import DurableTurnResult
from ...crashpoints import CrashPoint, crash_point
from .. import _turns
from .._documents import decode_model, decode_own_model, decode_turn, encode_model
from .._ledger import EffectStart, resolve_uncertain, start_effect
from .._settle import settle
from ..engine import DurabilityEngine, OpenedTurn, Reconciliation, StoredTurn, TurnCommit
from . import _schema
from ._errors import bounded, retrying, translated
from ._inspect import PostgresInspection
from ._lanes import Lanes
from ._lease import Heartbeat, LeaseSettings, PgLease, new_owner
from ._outbox import OutboxStatements, PostgresOutboxNotifier, PostgresOutboxSource
from ._reads import PostgresReads, last_reconciliation
from ._sql import Statements

__all__ = ["PostgresDurability"]

log = logging.getLogger("intention_kernel.postgres")

APPLICATION_NAME = "intention_kernel"

HEAD_CACHE_BYTES = 32 * 2**20
"""Default memory for the threads' last committed result texts (see ``_head``): 32 MiB."""


@dataclass(frozen=True, slots=True)
class _Acquired:
    """What one acquire statement returned."""

    lease: PgLease | None
    trusted: bool
    """The row's checkpoint is current (see ``_try_acquire``): no ``load`` statement needed."""
    row: Any
    sent: float
    """Loop time the statement was sent: the lease is proven held until ``sent + ttl``."""


@dataclass(frozen=True, slots=True)
class _ReadOnly:
    """The replay SELECT's row (``None``: not committed), sent instead of the acquire on a
    read-only session."""

    row: Any


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


class PostgresDurability(
    PostgresOutboxSource,
    PostgresOutboxNotifier,
    PostgresReads,
    PostgresInspection,
    DurabilityEngine[PgLease],
):
    """PostgreSQL durability: lease rows with fencing, one-statement commits.

    Open with ``PostgresDurability.open("postgresql://...")`` or ``open(pool)``; create the
    tables with ``setup()`` (or ``open(..., setup=True)``); ``open`` verifies the schema.
    """

    telemetry_system: str | None = "postgresql"  # its OpenTelemetry db.system.name
    _fenced: ClassVar[bool] = True
    """Writes check the lease token and a lost lease cancels the turn. Only a test subclass
    turns it off, to show that the fault tests detect the missing fencing."""

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
    ) -> None:
        super().__init__(lock_timeout=lock_timeout, json_limits=json_limits)
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
            statement_timeout = self.lock_timeout
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
        self._pool = pool
        self._lanes = Lanes(pool)
        self._owns_pool = owns_pool
        self._sql = Statements.render(self.schema, fencing=self._fenced)
        self._outbox_sql = OutboxStatements(self.schema)
        # thread id -> the result text this process last committed on it. A head whose stored
        # text is equal to it was written by our own encoder (see ``decode_own_model``).
        self._written: dict[str, str] = {}
        self._written_bytes = 0
        self.server_synchronous_commit: str | None = None
        # Lease releases that outlive a cancelled caller; ``close`` waits for them.
        self._background: set[asyncio.Task[None]] = set()

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
    ) -> _Opening:
        """Open from a ``postgresql://`` URL (owning a new pool) or an existing asyncpg pool.

        ``statement_cache_size=0`` turns prepared statements off for old transaction-mode
        poolers (PgBouncer < 1.21 or without ``max_prepared_statements``). ``listen=True``
        (URL only) keeps one extra connection in ``LISTEN`` so relays wake on outbox commits
        (see ``set_outbox_notify``); it is refused behind a transaction-mode pooler.
        ``statement_timeout`` (default ``lock_timeout``) bounds every statement of a turn.
        """

        async def factory() -> PostgresDurability:
            owns = isinstance(target, str)
            if owns:
                if not target.startswith(("postgresql://", "postgres://")):
                    raise ConfigurationError(
                        "the URL must start with postgresql://", context={"setting": "url"}
                    )
                with translated():
                    pool = await asyncpg.create_pool(
                        target,
                        min_size=min_size,
                        max_size=max_size,
                        statement_cache_size=statement_cache_size,
                        server_settings={"application_name": application_name},
                        reset=_keep_session,
                    )
            else:
                pool = target
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
                )
            except BaseException:
                if owns:  # refused settings must not leak the pool we just opened
                    await pool.close()
                raise
            try:
                if setup:
                    await store.setup()
                await store.verify()
                if listen:
                    if not owns:
                        raise ConfigurationError(
                            "listen=True needs a postgresql:// URL (it opens its own connection)",
                            context={"setting": "listen"},
                        )
                    await store._start_listener(target)
            except BaseException:
                await store.close()
                raise
            return store

        return _Opening(factory)

    async def setup(self) -> int:
        """Create or upgrade the tables (idempotent, serialized across processes)."""
        self._check_open()
        with translated():
            async with self._lanes.connection() as conn:
                return await _schema.migrate(conn, self.schema)

    migrate = setup

    async def verify(self) -> int:
        """Refuse a missing or newer schema; note a server ``synchronous_commit`` default."""
        self._check_open()
        with translated():
            async with self._lanes.connection() as conn:
                version = await _schema.verify(conn, self.schema)
                self.server_synchronous_commit = await conn.fetchval("SHOW synchronous_commit")
        if self.server_synchronous_commit in ("off", "local"):
            log.warning(
                "server synchronous_commit=%s: intention-kernel forces 'on' for its ledger "
                "writes and commits, but other writers on this server are not durable",
                self.server_synchronous_commit,
            )
        return version

    @property
    def pool(self) -> Any:
        """The asyncpg pool of the store, for tools that work on the same schema."""
        return self._pool

    # ---------------------------------------------------------------- statements

    # Each is bounded by ``statement_timeout`` (``bounded``): a session holding a row lock
    # or an exhausted pool ends the statement with a retryable STORE_BUSY, never a hang.

    async def _statement(
        self, method: str, sql: str, args: tuple[Any, ...], deadline: float | None = None
    ) -> Any:
        """``connection.<method>(sql, *args)`` on a lane, within the statement budget."""
        run = self._lanes.run
        return await bounded(
            lambda t: run(lambda c, t: getattr(c, method)(sql, *args, timeout=t), t),
            deadline or self.statement_timeout,
        )

    async def _fetchrow(self, sql: str, *args: Any) -> Any:
        return await self._statement("fetchrow", sql, args)

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        rows: list[Any] = await self._statement("fetch", sql, args)
        return rows

    async def _execute_status(self, sql: str, *args: Any, deadline: float | None = None) -> int:
        """Run one statement; the row count of its status tag (``UPDATE 3`` -> 3)."""
        status: str = await self._statement("execute", sql, args, deadline)
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def _execute(self, sql: str, *args: Any, deadline: float | None = None) -> None:
        await self._statement("execute", sql, args, deadline)

    # ---------------------------------------------------------------- lease

    async def _replay_read_only(self, thread_id: str, turn_id: str, refusal: Any) -> _Acquired:
        """On a read-only session: a committed turn is read with a plain SELECT (it replays
        there); any other turn is refused as the write would have been."""
        row = await self._fetchrow(self._sql.replay, thread_id, turn_id)
        if row is None:
            raise refusal
        return _Acquired(None, False, row, 0.0)

    async def _acquire_statement(self, thread_id: str, turn_id: str, owner: str) -> Any:
        """The acquire statement, or the replay SELECT (its row wrapped in ``_ReadOnly``) when
        the pooled session says it is read-only (``default_transaction_read_only``, a hot standby:
        both reported by the server on every connection since PostgreSQL 14)."""
        sql = self._sql

        async def statement(conn: Any, seconds: float) -> Any:
            settings = conn.get_settings()
            if (
                getattr(settings, "default_transaction_read_only", "off") == "on"
                or getattr(settings, "in_hot_standby", "off") == "on"
            ):
                return _ReadOnly(
                    await conn.fetchrow(sql.replay, thread_id, turn_id, timeout=seconds)
                )
            return await conn.fetchrow(
                sql.acquire,
                thread_id,
                turn_id,
                owner,
                self.lease_settings.ttl,
                True,
                timeout=seconds,
            )

        run = self._lanes.run
        return await bounded(lambda t: run(statement, t), self.statement_timeout)

    async def _try_acquire(
        self, thread_id: str, turn_id: str, *, skip_committed: bool
    ) -> _Acquired:
        owner = new_owner()
        sent = asyncio.get_running_loop().time()
        statement = (
            self._acquire_statement(thread_id, turn_id, owner)
            if skip_committed
            else self._fetchrow(
                self._sql.acquire, thread_id, turn_id, owner, self.lease_settings.ttl, False
            )
        )
        try:  # run to its end even if the caller is cancelled meanwhile (see ``settle``)
            row, cancel = await settle(statement)
        except BaseException as exc:
            if isinstance(exc, KernelError) and not exc.retryable:
                if skip_committed and exc.code is ErrorCode.STORE_READ_ONLY:
                    # Read-only without the server saying so (a pooler in between).
                    return await self._replay_read_only(thread_id, turn_id, exc)
                raise  # refused outright: it took nothing
            # Timed out, connection lost or cancelled: it may have taken the lease all the same.
            await self._give_back(thread_id, owner)
            raise
        if isinstance(row, _ReadOnly):  # the replay SELECT: nothing was taken
            if cancel is not None:
                raise cancel
            if row.row is None:
                raise DurabilityError(
                    "the database session is read-only (a standby?)",
                    code=ErrorCode.STORE_READ_ONLY,
                    context={"thread_id": thread_id},
                )
            return _Acquired(None, False, row.row, sent)
        if cancel is not None:
            if row["epoch"] is not None:
                await self._give_back(thread_id, owner)
            raise cancel
        lease = None if row["epoch"] is None else PgLease(thread_id, row["epoch"], owner)
        # The preloaded checkpoint is current only if the previous holder had released the
        # lease before this statement's snapshot (a commit releases it in its own transaction).
        trusted = lease is not None and (
            (row["seen_rows"] == 0 and lease.epoch == 1) or row["released_epoch"] == lease.epoch - 1
        )
        return _Acquired(lease, trusted, row, sent)

    async def _give_back(self, thread_id: str, owner: str) -> None:
        """Release the lease the acquisition by ``owner`` may have taken, to the end of the
        statement whatever happens to the caller (bounded); a failure is only logged, the
        lease then expires after its TTL. A cancellation that arrived meanwhile is raised."""
        release = self._execute(
            self._sql.release_owner, thread_id, owner, deadline=self._release_timeout
        )
        try:
            _, cancel = await settle(release)
        except Exception as exc:
            log.debug("lease give-back failed: %r", exc)
            return
        if cancel is not None:
            raise cancel

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task that may outlive its caller; kept referenced, and awaited by ``close``."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _wait_for_lease(self, thread_id: str, turn_id: str) -> _Acquired:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.lock_timeout
        delay = 0.005
        while True:
            acquired = await self._try_acquire(thread_id, turn_id, skip_committed=False)
            if acquired.lease is not None:
                return acquired
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise DurabilityError(
                    "timed out waiting for the thread lease",
                    code=ErrorCode.LOCK_TIMEOUT,
                    retryable=True,
                    context={"thread_id": thread_id, "timeout": self.lock_timeout},
                )
            await asyncio.sleep(min(remaining, random.uniform(delay / 2, delay)))
            delay = min(delay * 2, 0.25)

    @asynccontextmanager
    async def storage_open_turn(
        self, thread_id: str, turn_id: str
    ) -> AsyncIterator[OpenedTurn[PgLease]]:
        """One statement: the committed turn (replay, no lease taken) or the lease with the
        checkpoint; a ``load`` statement only when that checkpoint may be stale."""
        acquired = await self._try_acquire(thread_id, turn_id, skip_committed=True)
        prior = self._stored_turn(acquired.row, thread_id, turn_id)
        if prior is not None:
            yield OpenedTurn(prior, None)
            return
        if acquired.lease is None:
            acquired = await self._wait_for_lease(thread_id, turn_id)
        # No suspension between taking the lease and entering ``_holding``: a cancel cannot
        # leave it held.
        async with self._holding(acquired) as lease:
            row = acquired.row
            if not acquired.trusted:
                row = await self._fetchrow(self._sql.load, thread_id, turn_id)
            yield OpenedTurn(
                self._stored_turn(row, thread_id, turn_id), lease, self._head(row, thread_id)
            )

    @asynccontextmanager
    async def storage_lease(self, thread_id: str) -> AsyncIterator[PgLease]:
        async with self._holding(await self._wait_for_lease(thread_id, "")) as lease:
            yield lease

    @asynccontextmanager
    async def _holding(self, acquired: _Acquired) -> AsyncIterator[PgLease]:
        """Hold an acquired lease for the block: renewed by a heartbeat, released after."""
        lease = acquired.lease
        assert lease is not None
        task = asyncio.current_task()
        assert task is not None
        heartbeat = Heartbeat(
            lambda: self._renew(lease), self.lease_settings, task, detect_loss=self._fenced
        )
        lease.heartbeat = heartbeat
        heartbeat.start(acquired.sent)
        try:
            yield lease
        except asyncio.CancelledError as exc:
            if heartbeat.lost:
                task.uncancel()
                raise LeaseLostError(
                    "the thread lease was lost while the turn ran; the turn was cancelled",
                    context={"thread_id": lease.thread_id, "epoch": lease.epoch},
                ) from exc
            raise
        finally:
            heartbeat.halt()  # now, so that it cannot cancel this task any more
            if heartbeat.lost and task.cancelling():
                task.uncancel()
            if not lease.released:  # the usual end: the commit released it, nothing to send
                # Shielded: a cancel of this task propagates at once (never swallowed) while
                # the lease is still released, in order, by ``_end_lease``.
                await asyncio.shield(self._spawn(self._end_lease(lease, heartbeat)))

    async def _end_lease(self, lease: PgLease, heartbeat: Heartbeat) -> None:
        """Release once the renewal and every write of the turn in flight ended, so none
        lands after the release (a late one would be fenced anyway). A lost lease is left
        alone: it is another holder's now, or could not be renewed and is about to expire."""
        await heartbeat.stop()
        if heartbeat.lost:
            return
        await lease.writes_done(self.statement_timeout)
        await self._release(lease)

    async def _renew(self, lease: PgLease) -> bool:
        row = await self._fetchrow(
            self._sql.renew, lease.thread_id, lease.epoch, lease.owner, self.lease_settings.ttl
        )
        return row is not None

    @property
    def _release_timeout(self) -> float:
        return min(self.lease_settings.ttl, 5.0, self.statement_timeout)

    async def _release(self, lease: PgLease) -> None:
        """Expire the lease now. Bounded: if that fails, it simply expires after its TTL."""
        try:
            await self._execute(
                self._sql.release,
                lease.thread_id,
                lease.epoch,
                lease.owner,
                deadline=self._release_timeout,
            )
        except Exception as exc:
            log.debug("lease release failed: %r", exc)

    # ---------------------------------------------------------------- turns

    def _stored_turn(self, row: Any, thread_id: str, turn_id: str) -> StoredTurn | None:
        if row is None or row["prior_result"] is None:
            return None
        result = decode_turn(row["prior_result"], thread_id=thread_id, turn_id=turn_id)
        return StoredTurn(result, row["prior_fingerprint"])

    def _head(self, row: Any, thread_id: str) -> KernelCheckpoint | None:
        if row is None or row["head_result"] is None:
            return None
        text = row["head_result"]
        decode = decode_own_model if self._written.get(thread_id) == text else decode_model
        result = decode(DurableTurnResult, text, what="checkpoint", thread_id=thread_id)
        return result.checkpoint

    def _remember_written(self, thread_id: str, text: str) -> None:
        """Keep ``text`` as the thread's last commit, within ``head_cache_bytes`` (the least
        recently committed threads go first; a text larger than the bound is not kept)."""
        written = self._written
        old = written.pop(thread_id, None)
        if old is not None:
            self._written_bytes -= sys.getsizeof(old)
        size = sys.getsizeof(text)
        if size > self.head_cache_bytes:
            return
        self._written_bytes += size
        while self._written_bytes > self.head_cache_bytes:
            oldest = next(iter(written))
            self._written_bytes -= sys.getsizeof(written.pop(oldest))
        written[thread_id] = text

    async def storage_commit(self, lease: PgLease, commit: TurnCommit) -> None:
        thread_id, turn_id = commit.thread_id, commit.turn_id
        # The commit is one statement and so its own transaction: this is its last moment
        # before COMMIT (a crash here commits nothing).
        crash_point(CrashPoint.INSIDE_COMMIT, thread_id=thread_id, turn_id=turn_id)
        heartbeat = lease.heartbeat
        if heartbeat is not None:
            heartbeat.halt()  # the commit releases the lease: no renewal may race it
        try:
            row = await self._commit_statement(lease, commit)
        except BaseException as exc:
            if heartbeat is not None and not (lease.released or isinstance(exc, LeaseLostError)):
                heartbeat.resume()  # the lease is still held (or in doubt): keep it alive
            raise
        lease.released = bool(row["released"])
        if not lease.released and heartbeat is not None:
            heartbeat.resume()
        self._remember_written(thread_id, commit.result_json)

    async def _commit_statement(self, lease: PgLease, commit: TurnCommit) -> Any:
        """The commit statement; its row when the turn committed, else the typed refusal."""
        thread_id, turn_id, loaded_revision = (
            commit.thread_id,
            commit.turn_id,
            commit.loaded_revision,
        )
        try:
            with lease.write():
                row = await self._fetchrow(
                    self._sql.commit,
                    thread_id,
                    lease.epoch,
                    lease.owner,
                    turn_id,
                    commit.revision,
                    loaded_revision,
                    commit.fingerprint,
                    commit.result_json,
                    [e.sequence for e in commit.events],
                    commit.events_json,
                    commit.agent_fingerprint,
                    commit.pending_interaction,
                )
        except DurabilityError as exc:
            cause = exc.__cause__
            if isinstance(cause, asyncpg.UniqueViolationError):
                if cause.constraint_name == "turns_pkey":
                    raise _turns.already_committed(thread_id, turn_id) from cause
                raise TurnConflictError(
                    "another turn committed this revision",
                    code=ErrorCode.CHECKPOINT_REVISION_CONFLICT,
                    context={"thread_id": thread_id, "loaded_revision": loaded_revision},
                ) from cause
            raise
        if not row["fenced"]:
            after = await self._fetchrow(
                self._sql.after_commit, thread_id, lease.epoch, lease.owner, turn_id
            )
            if after["released_by_us"] and after["committed"]:
                # An earlier attempt of this commit landed (and released the lease) but its
                # answer was lost: the engine compares the stored result with this one.
                lease.released = True
                raise _turns.already_committed(thread_id, turn_id)
            raise LeaseLostError(
                context={"thread_id": thread_id, "epoch": lease.epoch, "turn_id": turn_id}
            )
        if not row["moved"]:
            _turns.check_revision(loaded_revision, row["stored_revision"] or 0, thread_id=thread_id)
            raise TurnConflictError(  # pragma: no cover - the check above always raises
                code=ErrorCode.CHECKPOINT_REVISION_CONFLICT, context={"thread_id": thread_id}
            )
        return row

    # ---------------------------------------------------------------- effects

    async def storage_begin_effect(
        self, lease: PgLease, turn_id: str, identity: EffectIdentity, now: datetime
    ) -> EffectStart:
        thread_id, key = lease.thread_id, identity.idempotency_key
        # A new key (the usual case): ``prepared`` is inserted unless the key exists, one
        # statement; the stored receipt comes back with a conflict.
        start = start_effect(None, identity, thread_id=thread_id, turn_id=turn_id, now=now)
        receipt = start.receipt
        with lease.write():
            row = await self._fetchrow(
                self._sql.prepare_receipt,
                thread_id,
                lease.epoch,
                lease.owner,
                key,
                receipt.id,
                str(receipt.status),
                receipt.updated_at,
                encode_model(receipt, limits=self.json_limits, what="receipt"),
            )
        if not row["fenced"]:
            raise LeaseLostError(context={"thread_id": thread_id, "epoch": lease.epoch})
        if row["written"]:
            return start
        text = row["existing"]
        for _ in range(5):
            if text is None:  # inserted concurrently, after this statement's snapshot
                row = await self._fetchrow(
                    self._sql.read_receipt, thread_id, lease.epoch, lease.owner, key
                )
                if not row["fenced"]:
                    raise LeaseLostError(context={"thread_id": thread_id, "epoch": lease.epoch})
                text = row["receipt"]
            existing = (
                None
                if text is None
                else decode_model(EffectReceipt, text, what="receipt", thread_id=thread_id)
            )
            text = None
            start = start_effect(existing, identity, thread_id=thread_id, turn_id=turn_id, now=now)
            if not start.write:
                return start
            expected = None if existing is None else str(existing.status)
            if await self._write_receipt(lease, start.receipt, expected):
                return start
        raise DurabilityError(
            "the receipt kept changing concurrently; nothing was called",
            code=ErrorCode.STORE_BUSY,
            retryable=True,
            context={"thread_id": thread_id, "idempotency_key": key},
        )

    async def storage_finish_effect(
        self, lease: PgLease, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        if not await self._write_receipt(lease, receipt, str(ReceiptStatus.PREPARED)):
            raise DurabilityError(
                "the receipt changed while its effect ran; its outcome was not recorded",
                code=ErrorCode.STORE_ERROR,
                context={"thread_id": lease.thread_id, "idempotency_key": receipt.idempotency_key},
            )

    async def _write_receipt(
        self, lease: PgLease, receipt: EffectReceipt, expected: str | None
    ) -> bool:
        """One fenced, durable statement; False when the stored status was not ``expected``."""
        with lease.write():
            row = await self._fetchrow(
                self._sql.write_receipt,
                lease.thread_id,
                lease.epoch,
                lease.owner,
                receipt.idempotency_key,
                receipt.id,
                str(receipt.status),
                receipt.updated_at,
                encode_model(receipt, limits=self.json_limits, what="receipt"),
                expected,
            )
        if not row["fenced"]:
            raise LeaseLostError(
                context={
                    "thread_id": lease.thread_id,
                    "epoch": lease.epoch,
                    "idempotency_key": receipt.idempotency_key,
                }
            )
        return bool(row["written"])

    async def storage_reconcile(
        self, decision: Reconciliation, lease: PgLease | None
    ) -> EffectReceipt:
        s = f'"{self.schema}"'
        thread_id, idempotency_key = decision.thread_id, decision.idempotency_key

        async def transaction() -> EffectReceipt:
            async with self._lanes.connection() as conn, conn.transaction():
                await conn.execute("SET LOCAL synchronous_commit = on")
                if lease is not None and not await conn.fetchval(
                    f"SELECT EXISTS (SELECT 1 FROM {s}.leases WHERE thread_id = $1"
                    " AND epoch = $2 AND owner = $3 FOR SHARE)",
                    thread_id,
                    lease.epoch,
                    lease.owner,
                ):
                    raise LeaseLostError(context={"thread_id": thread_id, "epoch": lease.epoch})
                text = await conn.fetchval(
                    f"SELECT receipt FROM {s}.receipts"
                    " WHERE thread_id = $1 AND idempotency_key = $2 FOR UPDATE",
                    thread_id,
                    idempotency_key,
                )
                existing = (
                    None
                    if text is None
                    else decode_model(EffectReceipt, text, what="receipt", thread_id=thread_id)
                )
                last = (
                    await last_reconciliation(conn, self.schema, thread_id, idempotency_key)
                    if decision.correct
                    else None
                )
                receipt, record = resolve_uncertain(
                    existing,
                    decision.outcome,
                    thread_id=thread_id,
                    idempotency_key=idempotency_key,
                    value=decision.value,
                    note=decision.note,
                    actor=decision.actor,
                    now=self._now(),
                    holds_lease=lease is not None,
                    correct=decision.correct,
                    last=last,
                )
                await conn.execute(
                    f"UPDATE {s}.receipts SET status = $3, updated_at = $4, receipt = $5"
                    " WHERE thread_id = $1 AND idempotency_key = $2",
                    thread_id,
                    idempotency_key,
                    str(receipt.status),
                    receipt.updated_at,
                    encode_model(receipt, limits=self.json_limits, what="receipt"),
                )
                await conn.execute(
                    f"INSERT INTO {s}.reconciliations (thread_id, idempotency_key, record)"
                    " VALUES ($1, $2, $3)",
                    thread_id,
                    idempotency_key,
                    encode_model(record, what="reconciliation"),
                )
                return receipt

        return await retrying(transaction)

    async def storage_close(self) -> None:
        if self._background:  # lease releases of cancelled turns, before the pool goes
            await asyncio.wait(self._background, timeout=self._release_timeout + 1)
        await self._stop_listener()
        await self._lanes.close()
        if self._owns_pool:
            await self._pool.close()
