"""``SQLiteTurns``: the ``TurnStorage`` role of the embedded store (and the row helpers its
other roles share).

Each member is one short transaction on the worker thread; none stays open while an
operation runs. The thread lease is a ``flock`` (see ``_lease``) plus an epoch row (fencing).
Acquiring only reads the epoch ``E``; the turn's first write transaction moves it from ``E`` to
``E + 1`` (compare-and-set) and later writes check ``E + 1``, all inside their own
``BEGIN IMMEDIATE`` transaction. So a turn without effects costs one durable commit, and of two
holders (a takeover) only the first to write gets on; the other gets ``LeaseLostError``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from ..._crashpoints import CrashPoint, crash_point
from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.codec import JsonLimits
from ...contracts.errors import (
    CheckpointCorruptError,
    LeaseLostError,
)
from ...contracts.receipts import (
    EffectIdentity,
    EffectReceipt,
)
from ...contracts.turns import DurableTurnResult
from .. import _turns
from .._documents import (
    OwnTexts,
    decode_model,
    decode_own_model,
    decode_turn,
    encode_model,
)
from .._ledger import EffectStart, start_effect
from .._writes import utc_now
from ..storage import Lease, OpenedTurn, StoredTurn, TurnCommit
from ._connection import Connection
from ._inbox_rows import mark_done
from ._lease import LockFiles

__all__ = ["SQLiteLease", "SQLiteTurns", "fenced_write", "put_receipt", "read_head", "read_receipt"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HEAD_CACHE_BYTES = 32 * 2**20
"""Memory for the threads' last committed result texts (see ``OwnTexts``): 32 MiB."""


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


T = TypeVar("T")


@dataclass(slots=True)
class SQLiteLease(Lease):
    """``epoch`` is the value read on acquire until the first write moved it (``bumped``)."""

    bumped: bool = False


def _read_epoch(conn: sqlite3.Connection, thread_id: str) -> int:
    row = conn.execute("SELECT epoch FROM ik_leases WHERE thread_id = ?", (thread_id,)).fetchone()
    return 0 if row is None else int(row[0])


def _fence(conn: sqlite3.Connection, lease: SQLiteLease) -> None:
    """Inside a write transaction: take the epoch over (first write) or check it (later)."""
    if lease.bumped:
        changed = int(_read_epoch(conn, lease.thread_id) == lease.epoch)
    elif lease.epoch == 0:
        changed = conn.execute(
            "INSERT INTO ik_leases (thread_id, epoch) VALUES (?, 1)"
            " ON CONFLICT (thread_id) DO NOTHING",
            (lease.thread_id,),
        ).rowcount
    else:
        changed = conn.execute(
            "UPDATE ik_leases SET epoch = epoch + 1 WHERE thread_id = ? AND epoch = ?",
            (lease.thread_id, lease.epoch),
        ).rowcount
    if changed != 1:
        current = _read_epoch(conn, lease.thread_id)
        expected = lease.epoch if lease.bumped else lease.epoch + 1
        raise LeaseLostError(
            context={"thread_id": lease.thread_id, "epoch": expected, "current": current}
        )


def _read_turn(conn: sqlite3.Connection, thread_id: str, turn_id: str) -> StoredTurn | None:
    row = conn.execute(
        "SELECT CAST(result AS BLOB), fingerprint FROM ik_turns"
        " WHERE thread_id = ? AND turn_id = ?",
        (thread_id, turn_id),
    ).fetchone()
    return None if row is None else _stored_turn(row[0], row[1], thread_id, turn_id)


def _stored_turn(text: bytes, fingerprint: str | None, thread_id: str, turn_id: str) -> StoredTurn:
    result = decode_turn(text, thread_id=thread_id, turn_id=turn_id)
    if result.thread_id != thread_id or result.turn_id != turn_id:
        raise CheckpointCorruptError(
            "stored turn result belongs to another turn",
            context={"what": "turn result", "thread_id": thread_id, "turn_id": turn_id},
        )
    return StoredTurn(result, fingerprint)


def read_head(
    conn: sqlite3.Connection, thread_id: str, own: OwnTexts | None = None
) -> KernelCheckpoint | None:
    row = conn.execute(
        "SELECT h.turn_id, h.revision, CAST(t.result AS BLOB) FROM ik_heads AS h"
        " LEFT JOIN ik_turns AS t ON t.thread_id = h.thread_id AND t.turn_id = h.turn_id"
        " WHERE h.thread_id = ?",
        (thread_id,),
    ).fetchone()
    return None if row is None else _head(thread_id, *row, own=own)


def _head(
    thread_id: str, turn_id: str, revision: int, text: bytes | None, *, own: OwnTexts | None
) -> KernelCheckpoint:
    """The checkpoint of a head row (its turn id and revision) and its turn's result text."""
    context = {"what": "checkpoint", "thread_id": thread_id, "turn_id": turn_id}
    if text is None:
        raise CheckpointCorruptError("the thread's head points at a missing turn", context=context)
    if own is not None and own.is_own(thread_id, text):
        result = decode_own_model(DurableTurnResult, text, **context)
    else:
        result = decode_model(DurableTurnResult, text, **context)
    if result.checkpoint.revision != revision:
        raise CheckpointCorruptError(
            "the stored checkpoint revision does not match the thread's head", context=context
        )
    return result.checkpoint


_OPEN = (
    # One statement (one snapshot) for what opening a turn needs: the committed turn (replay),
    # the lease epoch, the head and its turn's result.
    "SELECT CAST(p.result AS BLOB), p.fingerprint, l.epoch, h.turn_id, h.revision,"
    " CAST(t.result AS BLOB) FROM (SELECT 1) AS one"
    " LEFT JOIN ik_turns AS p ON p.thread_id = ?1 AND p.turn_id = ?2"
    " LEFT JOIN ik_leases AS l ON l.thread_id = ?1"
    " LEFT JOIN ik_heads AS h ON h.thread_id = ?1"
    " LEFT JOIN ik_turns AS t ON t.thread_id = h.thread_id AND t.turn_id = h.turn_id"
)


def read_receipt(
    conn: sqlite3.Connection, thread_id: str, idempotency_key: str
) -> EffectReceipt | None:
    row = conn.execute(
        "SELECT CAST(document AS BLOB) FROM ik_receipts"
        " WHERE thread_id = ? AND idempotency_key = ?",
        (thread_id, idempotency_key),
    ).fetchone()
    if row is None:
        return None
    return decode_model(EffectReceipt, row[0], what="receipt", thread_id=thread_id)


async def fenced_write(
    db: Connection, lease: SQLiteLease, fn: Callable[[sqlite3.Connection], T]
) -> T:
    """Run ``fn`` in one write transaction behind the lease's fence."""

    def run(conn: sqlite3.Connection) -> T:
        _fence(conn, lease)
        return fn(conn)

    def took_over() -> None:
        # On the worker thread, right after COMMIT: the next write of this turn (queued
        # behind it, or after a cancelled caller) must see the epoch it moved.
        if not lease.bumped:
            lease.epoch += 1
            lease.bumped = True

    return await db.write(run, on_commit=took_over)


def put_receipt(conn: sqlite3.Connection, receipt: EffectReceipt, limits: JsonLimits) -> None:
    document = encode_model(receipt, limits=limits, what="receipt")
    conn.execute(
        "INSERT INTO ik_receipts (thread_id, idempotency_key, receipt_id, capability_id,"
        " status, updated_us, document) VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (thread_id, idempotency_key) DO UPDATE SET"
        " receipt_id = excluded.receipt_id, capability_id = excluded.capability_id,"
        " status = excluded.status, updated_us = excluded.updated_us,"
        " document = excluded.document",
        (
            receipt.thread_id,
            receipt.idempotency_key,
            receipt.id,
            receipt.capability_id,
            str(receipt.status),
            _micros(receipt.updated_at),
            document,
        ),
    )


class SQLiteTurns:
    """``TurnStorage`` over one SQLite ``Connection`` and the thread lock files."""

    def __init__(
        self,
        db: Connection,
        locks: LockFiles,
        own: OwnTexts,
        *,
        lock_timeout: float,
        json_limits: JsonLimits,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._db = db
        self._locks = locks
        # Used on the worker thread only: the result texts this process committed last.
        self._own = own
        self.lock_timeout = lock_timeout
        self.json_limits = json_limits
        self._clock = clock

    @asynccontextmanager
    async def _hold(self, thread_id: str) -> AsyncIterator[None]:
        self._locks.ensure_directory()
        async with self._locks.hold(thread_id, self.lock_timeout):
            yield

    @asynccontextmanager
    async def open_turn(
        self, thread_id: str, turn_id: str
    ) -> AsyncIterator[OpenedTurn[SQLiteLease]]:
        """One hand-off to the worker thread in the usual case: lock the thread's file
        without waiting and read the turn, epoch and head there; a committed turn is
        replayed without the lock. Only when another holder has the lock does the turn wait
        for it here (polling) and load in a second hand-off."""
        self._locks.ensure_directory()
        locks, own = self._locks, self._own
        fd = locks.take(thread_id)
        try:

            def open_turn(conn: sqlite3.Connection) -> OpenedTurn[SQLiteLease] | None:
                locked = locks.try_lock(fd, thread_id)
                # Read after locking: the epoch and the head are then current.
                prior, fingerprint, epoch, head_turn, revision, text = conn.execute(
                    _OPEN, (thread_id, turn_id)
                ).fetchone()
                if prior is not None:  # a replay needs no lock
                    return OpenedTurn(_stored_turn(prior, fingerprint, thread_id, turn_id), None)
                if not locked:
                    return None
                # Read only: the first write of the turn bumps the epoch (module docstring).
                lease = SQLiteLease(thread_id, 0 if epoch is None else int(epoch))
                if head_turn is None:
                    return OpenedTurn(None, lease, None)
                return OpenedTurn(None, lease, _head(thread_id, head_turn, revision, text, own=own))

            opened = await self._db.read(open_turn)
            if opened is None:  # another holder has it: wait, then load under the lock
                await locks.wait(fd, thread_id, self.lock_timeout)
                opened = await self._db.read(self._load(thread_id, turn_id, own))
            yield opened
        finally:
            locks.give_back(thread_id, fd)  # unlocks a lock taken (a replay took none)

    @staticmethod
    def _load(
        thread_id: str, turn_id: str, own: OwnTexts
    ) -> Callable[[sqlite3.Connection], OpenedTurn[SQLiteLease]]:
        def load(conn: sqlite3.Connection) -> OpenedTurn[SQLiteLease]:
            lease = SQLiteLease(thread_id, _read_epoch(conn, thread_id))
            return OpenedTurn(
                _read_turn(conn, thread_id, turn_id), lease, read_head(conn, thread_id, own)
            )

        return load

    @asynccontextmanager
    async def lease(self, thread_id: str) -> AsyncIterator[SQLiteLease]:
        async with self._hold(thread_id):
            yield SQLiteLease(thread_id, await self._db.read(lambda c: _read_epoch(c, thread_id)))

    async def begin_effect(
        self, lease: SQLiteLease, turn_id: str, identity: EffectIdentity, now: datetime
    ) -> EffectStart:
        def begin(conn: sqlite3.Connection) -> EffectStart:
            existing = read_receipt(conn, lease.thread_id, identity.idempotency_key)
            start = start_effect(
                existing, identity, thread_id=lease.thread_id, turn_id=turn_id, now=now
            )
            if start.write:
                put_receipt(conn, start.receipt, self.json_limits)
            return start

        return await fenced_write(self._db, lease, begin)

    async def finish_effect(
        self, lease: SQLiteLease, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        await fenced_write(
            self._db, lease, lambda conn: put_receipt(conn, receipt, self.json_limits)
        )

    async def commit(self, lease: SQLiteLease, commit: TurnCommit) -> None:
        thread_id, turn_id, revision = commit.thread_id, commit.turn_id, commit.revision
        loaded_revision = commit.loaded_revision

        def write(conn: sqlite3.Connection) -> None:
            exists, stored = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM ik_turns WHERE thread_id = ?1 AND turn_id = ?2),"
                " (SELECT revision FROM ik_heads WHERE thread_id = ?1)",
                (thread_id, turn_id),
            ).fetchone()
            if exists:
                raise _turns.already_committed(thread_id, turn_id)
            _turns.check_revision(loaded_revision, stored or 0, thread_id=thread_id)
            now = self._clock()
            conn.execute(
                "INSERT INTO ik_turns (thread_id, turn_id, revision, fingerprint, result,"
                " committed_at) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    thread_id,
                    turn_id,
                    revision,
                    commit.fingerprint,
                    commit.result_json,
                    now.isoformat(),
                ),
            )
            mark_done(conn, thread_id, turn_id, now, commit.progress)  # done iff committed
            changed = conn.execute(
                "INSERT INTO ik_heads (thread_id, revision, turn_id, agent_fingerprint,"
                " pending_interaction) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (thread_id) DO UPDATE SET revision = excluded.revision,"
                " turn_id = excluded.turn_id, agent_fingerprint = excluded.agent_fingerprint,"
                " pending_interaction = excluded.pending_interaction"
                " WHERE ik_heads.revision = ?",
                (thread_id, revision, turn_id, agent_fingerprint, pending, loaded_revision),
            ).rowcount
            if changed != 1:  # unreachable while the check above holds; the CAS is the guard
                _turns.check_revision(loaded_revision, -1, thread_id=thread_id)
            conn.executemany(
                "INSERT INTO ik_outbox (thread_id, turn_id, event_id, sequence, document,"
                " revision) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (thread_id, turn_id, event.id, event.sequence, text, revision)
                    for event, text in zip(commit.events, commit.events_json, strict=True)
                ],
            )
            crash_point(CrashPoint.INSIDE_COMMIT, thread_id=thread_id, turn_id=turn_id)
            # Our own encoder's text whether or not COMMIT then succeeds (see ``OwnTexts``).
            own.remember(thread_id, result_bytes)

        own, result_bytes = self._own, commit.result_json.encode("utf-8")
        agent_fingerprint, pending = commit.agent_fingerprint, commit.pending_interaction
        await fenced_write(self._db, lease, write)

    async def read_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        return await self._db.read(lambda conn: _read_turn(conn, thread_id, turn_id))

    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        return await self._db.read(lambda conn: read_receipt(conn, thread_id, idempotency_key))

    async def close(self) -> None:
        self._locks.close()
        await self._db.close()
