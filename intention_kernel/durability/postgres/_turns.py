"""``PostgresTurns``: the ``TurnStorage`` role of the PostgreSQL store.

Leases are rows with an epoch and an owner token; every write checks them in its own statement
(see ``_sql``). A lost lease cancels the turn (the heartbeat, ``_lease``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import asyncpg

from ..._crashpoints import CrashPoint, crash_point
from ...contracts.codec import JsonLimits
from ...contracts.errors import (
    DurabilityError,
    ErrorCode,
    KernelError,
    LeaseLostError,
    TurnConflictError,
)
from ...contracts.receipts import EffectIdentity, EffectReceipt
from .. import _turns
from .._documents import decode_turn
from .._ledger import EffectStart
from .._settle import settle
from ..storage import OpenedTurn, StoredTurn, TurnCommit
from ._acquire import Acquire, Acquired, ReadOnly, acquire_batch, acquired_from, replay_read_only
from ._connection import PgConnection
from ._effects import PostgresEffects
from ._group import Commit, commit_batch
from ._handoff import HandedLeases
from ._heads import HeadTexts
from ._lease import Heartbeat, LeaseSettings, PgLease, new_owner
from ._renewals import Renewals
from ._replica import from_reads, settled_first
from ._sql import Statements

__all__ = ["PostgresTurns"]

log = logging.getLogger("intention_kernel.postgres")


class PostgresTurns:
    """``TurnStorage`` on PostgreSQL: lease rows with fencing, one-statement commits.

    ``sql`` are the statements rendered for the schema; only a test builds them without
    fencing (``Statements.render(schema, fencing=False)``) to show the fault tests catch it.
    ``reads`` is the read pool (a hot standby) a committed turn is replayed from (``_replica``);
    by default the primary's.
    """

    def __init__(
        self,
        db: PgConnection,
        sql: Statements,
        heads: HeadTexts,
        *,
        lease_settings: LeaseSettings,
        lock_timeout: float,
        json_limits: JsonLimits,
        reads: PgConnection | None = None,
    ) -> None:
        self._db = db
        self._reads = db if reads is None else reads
        self._sql = sql
        self._heads = heads
        self.lease_settings = lease_settings
        self.lock_timeout = lock_timeout
        self.json_limits = json_limits
        self._effects = PostgresEffects(db, sql, json_limits=json_limits)
        # Lease releases that outlive a cancelled caller; ``close`` waits for them.
        self._background: set[asyncio.Task[None]] = set()
        self.handed = HandedLeases(lease_settings, self._give_back)
        """Leases a submit that claims took for its worker's turn (see ``_handoff``)."""
        self.acquires = acquire_batch(db, sql, lease_settings.ttl)
        """Lease acquires alone when idle, in groups when they queue up (see ``_acquire``)."""
        self.group = commit_batch(db, sql, self._send_commit)
        """Commits alone when idle, in groups when they queue up (see ``_group``)."""
        self.renewals = Renewals(db, sql, lease_settings.ttl)
        """Heartbeats due together renew in one statement (see ``_renewals``)."""

    async def _try_acquire(self, thread_id: str, turn_id: str, *, skip_committed: bool) -> Acquired:
        owner = new_owner()
        sent = asyncio.get_running_loop().time()
        statement = self.acquires.send(Acquire(thread_id, turn_id, owner, skip_committed))
        try:  # run to its end even if the caller is cancelled meanwhile (see ``settle``)
            row, cancel = await settle(statement)
        except BaseException as exc:
            if isinstance(exc, KernelError) and not exc.retryable:
                if skip_committed and exc.code is ErrorCode.STORE_READ_ONLY:
                    # Read-only without the server saying so (a pooler in between).
                    return await replay_read_only(self._db, self._sql, thread_id, turn_id, exc)
                raise  # refused outright: it took nothing
            # Timed out, connection lost or cancelled: it may have taken the lease all the same.
            await self._give_back(thread_id, owner)
            raise
        if isinstance(row, ReadOnly):  # the replay SELECT: nothing was taken
            if cancel is not None:
                raise cancel
            if row.row is None:
                raise DurabilityError(
                    "the database session is read-only (a standby?)",
                    code=ErrorCode.STORE_READ_ONLY,
                    context={"thread_id": thread_id},
                )
            return Acquired(None, False, row.row, sent)
        if cancel is not None:
            if row["epoch"] is not None:
                await self._give_back(thread_id, owner)
            raise cancel
        return acquired_from(row, thread_id, owner, sent, row["epoch"])

    async def _give_back(self, thread_id: str, owner: str) -> None:
        """Release the lease the acquisition by ``owner`` may have taken, to the end of the
        statement whatever happens to the caller (bounded); a failure is only logged, the
        lease then expires after its TTL. A cancellation that arrived meanwhile is raised."""
        release = self._db.execute(
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

    async def _wait_for_lease(self, thread_id: str, turn_id: str) -> Acquired:
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
    async def open_turn(self, thread_id: str, turn_id: str) -> AsyncIterator[OpenedTurn[PgLease]]:
        """One statement: the committed turn (replay, no lease taken) or the lease with the
        checkpoint; a ``load`` statement only when that checkpoint may be stale. None for a
        turn whose submit took the lease for it (``handed``). With a read pool, a turn it has
        committed replays from there alone; one it has not goes the primary's way."""
        acquired = self.handed.take(thread_id, turn_id)
        if acquired is None and self._reads is not self._db:
            replayed = await self._replayed(thread_id, turn_id)
            if replayed is not None:
                yield OpenedTurn(replayed, None)
                return
        if acquired is None:
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
                row = await self._db.fetchrow(self._sql.load, thread_id, turn_id)
            yield OpenedTurn(
                self._stored_turn(row, thread_id, turn_id),
                lease,
                self._heads.checkpoint(row, thread_id),
            )

    @asynccontextmanager
    async def lease(self, thread_id: str) -> AsyncIterator[PgLease]:
        async with self._holding(await self._wait_for_lease(thread_id, "")) as lease:
            yield lease

    @asynccontextmanager
    async def _holding(self, acquired: Acquired) -> AsyncIterator[PgLease]:
        """Hold an acquired lease for the block: renewed by a heartbeat, released after."""
        lease = acquired.lease
        assert lease is not None
        task = asyncio.current_task()
        assert task is not None
        heartbeat = Heartbeat(
            lambda: self._renew(lease), self.lease_settings, task, detect_loss=self._sql.fencing
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
        await lease.writes_done(self._db.statement_timeout)
        await self._release(lease)

    async def _renew(self, lease: PgLease) -> bool:
        return await self.renewals.renew(lease)

    @property
    def _release_timeout(self) -> float:
        return min(self.lease_settings.ttl, 5.0, self._db.statement_timeout)

    async def _release(self, lease: PgLease) -> None:
        """Expire the lease now. Bounded: if that fails, it simply expires after its TTL."""
        try:
            await self._db.execute(
                self._sql.release,
                lease.thread_id,
                lease.epoch,
                lease.owner,
                deadline=self._release_timeout,
            )
        except Exception as exc:
            log.debug("lease release failed: %r", exc)

    async def _replayed(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        """The committed turn as the read pool has it (``None``: not there, or the pool did
        not answer: the primary decides)."""
        row = await from_reads(
            self._reads, lambda db: db.fetchrow(self._sql.replay, thread_id, turn_id)
        )
        return self._stored_turn(row, thread_id, turn_id)

    def _stored_turn(self, row: Any, thread_id: str, turn_id: str) -> StoredTurn | None:
        if row is None or row["prior_result"] is None:
            return None
        result = decode_turn(row["prior_result"], thread_id=thread_id, turn_id=turn_id)
        return StoredTurn(result, row["prior_fingerprint"])

    async def commit(self, lease: PgLease, commit: TurnCommit) -> None:
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
        self._heads.remember(thread_id, commit.result_json)

    async def _commit_statement(self, lease: PgLease, commit: TurnCommit) -> Any:
        """The commit statement; its row when the turn committed, else the typed refusal."""
        thread_id, turn_id, loaded_revision = (
            commit.thread_id,
            commit.turn_id,
            commit.loaded_revision,
        )
        try:
            with lease.write():
                row = await self.group.send((lease, commit))
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
        if row["fenced"] and row.get("already"):  # left out of a group commit: stored
            raise _turns.already_committed(thread_id, turn_id)
        if not row["fenced"]:
            after = await self._db.fetchrow(
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

    async def _send_commit(self, queued: Commit) -> Any:
        """One commit's own statement (``commit``): its row, or the server's refusal."""
        lease, commit = queued
        return await self._db.fetchrow(
            self._sql.commit,
            commit.thread_id,
            lease.epoch,
            lease.owner,
            commit.turn_id,
            commit.revision,
            commit.loaded_revision,
            commit.fingerprint,
            commit.result_json,
            [e.sequence for e in commit.events],
            commit.events_json,
            commit.agent_fingerprint,
            commit.pending_interaction,
            list(commit.progress),
        )

    # ---------------------------------------------------------------- effects

    async def begin_effect(
        self, lease: PgLease, turn_id: str, identity: EffectIdentity, now: datetime
    ) -> EffectStart:
        return await self._effects.begin_effect(lease, turn_id, identity, now)

    async def finish_effect(
        self, lease: PgLease, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        await self._effects.finish_effect(lease, receipt, value_json)

    async def read_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        """The committed turn, from the read pool when it has it (a committed turn never
        changes), else from the primary."""
        row = await settled_first(
            self._reads,
            self._db,
            lambda db: db.fetchrow(self._sql.find_turn, thread_id, turn_id),
            lambda found: found is not None,
        )
        if row is None:
            return None
        result = decode_turn(row["result"], thread_id=thread_id, turn_id=turn_id)
        return StoredTurn(result, row["fingerprint"])

    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        return await self._effects.get_receipt(thread_id, idempotency_key)

    async def close(self) -> None:
        await self.acquires.close()
        await self.group.close()
        await self.renewals.close()
        await self.handed.close()
        if self._background:  # lease releases of cancelled turns, before the pool goes
            await asyncio.wait(self._background, timeout=self._release_timeout + 1)
        await self._db.close()
