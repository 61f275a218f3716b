"""``SQLiteDurability``: the embedded durable store, safe across processes on one machine.

Each ``storage_*`` hook is one short transaction on the worker thread; none stays open while an
operation runs. The thread lease is a ``flock`` (see ``_lease``) plus an epoch row (fencing).
Acquiring only reads the epoch ``E``; the turn's first write transaction moves it from ``E`` to
``E + 1`` (compare-and-set) and later writes check ``E + 1``, all inside their own
``BEGIN IMMEDIATE`` transaction. So a turn without effects costs one durable commit, and of two
holders (a takeover) only the first to write gets on; the other gets ``LeaseLostError``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.codec import DEFAULT_LIMITS, JsonLimits
from ...contracts.errors import (
    CheckpointCorruptError,
    ConfigurationError,
    LeaseLostError,
)
from ...contracts.events import StoredEvent
from ...contracts.receipts import (
    EffectIdentity,
    EffectReceipt,
    ReceiptStatus,
    ReconciliationRecord,
)
from ...contracts.turns import DurableTurnResult
from ...crashpoints import CrashPoint, crash_point
from .. import _turns
from .._documents import (
    PRUNED_TURN,
    OwnTexts,
    decode_model,
    decode_own_model,
    decode_turn,
    encode_model,
    unreadable,
    unreadable_receipt,
)
from .._ledger import EffectStart, resolve_uncertain, start_effect
from ..engine import DurabilityEngine, Lease, OpenedTurn, Reconciliation, StoredTurn, TurnCommit
from ._connection import Connection
from ._inspect import RECEIPT_COLUMNS, SQLiteInspection, awaiting_operator, lease_probe
from ._lease import LockFiles
from ._location import check_local, parse_location
from ._outbox import EVENT_COLUMNS, SQLiteOutboxSource, stored_event

__all__ = ["SQLiteDurability"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HEAD_CACHE_BYTES = 32 * 2**20
"""Memory for the threads' last committed result texts (see ``OwnTexts``): 32 MiB."""


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


T = TypeVar("T")


@dataclass(slots=True)
class _Lease(Lease):
    """``epoch`` is the value read on acquire until the first write moved it (``bumped``)."""

    bumped: bool = False


def _read_epoch(conn: sqlite3.Connection, thread_id: str) -> int:
    row = conn.execute("SELECT epoch FROM ik_leases WHERE thread_id = ?", (thread_id,)).fetchone()
    return 0 if row is None else int(row[0])


def _fence(conn: sqlite3.Connection, lease: _Lease) -> None:
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


def _read_head(
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


def _read_receipt(
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


class SQLiteDurability(SQLiteOutboxSource, SQLiteInspection, DurabilityEngine[_Lease]):
    """Durable turns in one SQLite file, shared safely by the processes of one machine, and an
    ``OutboxSource`` for relays (see ``_outbox``) and a ``StoreInspector`` (see ``_inspect``).
    The engine owns the public methods; this class and its two mixins (listed first, so
    their hooks stand in for the engine's abstract ones) implement the ``storage_*`` hooks.

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
        super().__init__(lock_timeout=lock_timeout, json_limits=json_limits)
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
        # Used on the worker thread only: the result texts this process committed last.
        self._own = OwnTexts(HEAD_CACHE_BYTES)

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

    # ---------------------------------------------------------------- turns and effects

    @asynccontextmanager
    async def _hold(self, thread_id: str) -> AsyncIterator[None]:
        self._locks.ensure_directory()
        async with self._locks.hold(thread_id, self.lock_timeout):
            yield

    @asynccontextmanager
    async def storage_open_turn(
        self, thread_id: str, turn_id: str
    ) -> AsyncIterator[OpenedTurn[_Lease]]:
        """One hand-off to the worker thread in the usual case: lock the thread's file
        without waiting and read the turn, epoch and head there; a committed turn is
        replayed without the lock. Only when another holder has the lock does the turn wait
        for it here (polling) and load in a second hand-off."""
        self._locks.ensure_directory()
        locks, own = self._locks, self._own
        fd = locks.take(thread_id)
        try:

            def open_turn(conn: sqlite3.Connection) -> OpenedTurn[_Lease] | None:
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
                lease = _Lease(thread_id, 0 if epoch is None else int(epoch))
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
    ) -> Callable[[sqlite3.Connection], OpenedTurn[_Lease]]:
        def load(conn: sqlite3.Connection) -> OpenedTurn[_Lease]:
            lease = _Lease(thread_id, _read_epoch(conn, thread_id))
            return OpenedTurn(
                _read_turn(conn, thread_id, turn_id), lease, _read_head(conn, thread_id, own)
            )

        return load

    @asynccontextmanager
    async def storage_lease(self, thread_id: str) -> AsyncIterator[_Lease]:
        async with self._hold(thread_id):
            yield _Lease(thread_id, await self._db.read(lambda c: _read_epoch(c, thread_id)))

    async def _fenced_write(self, lease: _Lease, fn: Callable[[sqlite3.Connection], T]) -> T:
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

        return await self._db.write(run, on_commit=took_over)

    async def storage_begin_effect(
        self, lease: _Lease, turn_id: str, identity: EffectIdentity, now: datetime
    ) -> EffectStart:
        def begin(conn: sqlite3.Connection) -> EffectStart:
            existing = _read_receipt(conn, lease.thread_id, identity.idempotency_key)
            start = start_effect(
                existing, identity, thread_id=lease.thread_id, turn_id=turn_id, now=now
            )
            if start.write:
                self._put_receipt(conn, start.receipt)
            return start

        return await self._fenced_write(lease, begin)

    async def storage_finish_effect(
        self, lease: _Lease, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        await self._fenced_write(lease, lambda conn: self._put_receipt(conn, receipt))

    def _put_receipt(self, conn: sqlite3.Connection, receipt: EffectReceipt) -> None:
        document = encode_model(receipt, limits=self.json_limits, what="receipt")
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

    async def storage_commit(self, lease: _Lease, commit: TurnCommit) -> None:
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
            conn.execute(
                "INSERT INTO ik_turns (thread_id, turn_id, revision, fingerprint, result,"
                " committed_at) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    thread_id,
                    turn_id,
                    revision,
                    commit.fingerprint,
                    commit.result_json,
                    self._now().isoformat(),
                ),
            )
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
                "INSERT INTO ik_outbox (thread_id, turn_id, event_id, sequence, document)"
                " VALUES (?, ?, ?, ?, ?)",
                [
                    (thread_id, turn_id, event.id, event.sequence, text)
                    for event, text in zip(commit.events, commit.events_json, strict=True)
                ],
            )
            crash_point(CrashPoint.INSIDE_COMMIT, thread_id=thread_id, turn_id=turn_id)
            # Our own encoder's text whether or not COMMIT then succeeds (see ``OwnTexts``).
            own.remember(thread_id, result_bytes)

        own, result_bytes = self._own, commit.result_json.encode("utf-8")
        agent_fingerprint, pending = commit.agent_fingerprint, commit.pending_interaction
        await self._fenced_write(lease, write)

    async def storage_reconcile(
        self, decision: Reconciliation, lease: _Lease | None
    ) -> EffectReceipt:
        thread_id, key = decision.thread_id, decision.idempotency_key

        def reconcile(conn: sqlite3.Connection) -> EffectReceipt:
            last = _last_reconciliation(conn, thread_id, key) if decision.correct else None
            receipt, record = resolve_uncertain(
                _read_receipt(conn, thread_id, key),
                decision.outcome,
                thread_id=thread_id,
                idempotency_key=key,
                value=decision.value,
                note=decision.note,
                actor=decision.actor,
                now=self._now(),
                holds_lease=lease is not None,
                correct=decision.correct,
                last=last,
            )
            self._put_receipt(conn, receipt)
            conn.execute(
                "INSERT INTO ik_reconciliations (id, thread_id, idempotency_key, document)"
                " VALUES (?, ?, ?, ?)",
                (
                    record.id,
                    thread_id,
                    key,
                    encode_model(record, limits=self.json_limits, what="reconciliation"),
                ),
            )
            return receipt

        if lease is None:
            return await self._db.write(reconcile)
        # The epoch moves in this transaction: a paused former holder is fenced.
        return await self._fenced_write(lease, reconcile)

    async def storage_close(self) -> None:
        self._locks.close()
        await self._db.close()

    # ---------------------------------------------------------------- reading back

    async def storage_read_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        return await self._db.read(lambda conn: _read_turn(conn, thread_id, turn_id))

    async def storage_load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        own = self._own
        return await self._db.read(lambda conn: _read_head(conn, thread_id, own))

    async def storage_list_turns(
        self, thread_id: str, after_revision: int, limit: int
    ) -> list[DurableTurnResult]:
        def read(conn: sqlite3.Connection) -> list[DurableTurnResult]:
            rows = conn.execute(
                "SELECT turn_id, CAST(result AS BLOB) FROM ik_turns"
                " WHERE thread_id = ? AND revision > ? AND result != ?"
                " ORDER BY revision LIMIT ?",
                (thread_id, after_revision, PRUNED_TURN, limit),
            ).fetchall()
            return [decode_turn(text, thread_id=thread_id, turn_id=turn) for turn, text in rows]

        return await self._db.read(read)

    async def storage_get_receipt(
        self, thread_id: str, idempotency_key: str
    ) -> EffectReceipt | None:
        return await self._db.read(lambda conn: _read_receipt(conn, thread_id, idempotency_key))

    async def storage_list_receipts(
        self, status: ReceiptStatus | None, thread_id: str | None, limit: int
    ) -> list[EffectReceipt]:
        held = lease_probe(self._locks)

        def read(conn: sqlite3.Connection) -> list[EffectReceipt]:
            if status is ReceiptStatus.UNCERTAIN:
                # And interrupted ``prepared`` receipts (no live lock holder), as stored.
                rows = awaiting_operator(conn, held, thread_id=thread_id, limit=limit)
            else:
                # ``status = ?`` uses ik_receipts_by_status: listing a status stays cheap.
                wanted = None if status is None else str(status)
                clauses, args = _filters(status=wanted, thread_id=thread_id)
                rows = conn.execute(
                    f"SELECT {RECEIPT_COLUMNS}{clauses} ORDER BY updated_us, receipt_id LIMIT ?",
                    (*args, limit),
                ).fetchall()
            return [_listed_receipt(row) for row in rows]

        return await self._db.read(read)

    async def storage_reconciliations(
        self, thread_id: str | None, idempotency_key: str | None
    ) -> list[ReconciliationRecord]:
        def read(conn: sqlite3.Connection) -> list[ReconciliationRecord]:
            clauses, args = _filters(thread_id=thread_id, idempotency_key=idempotency_key)
            rows = conn.execute(
                f"SELECT CAST(document AS BLOB) FROM ik_reconciliations{clauses} ORDER BY seq",
                args,
            ).fetchall()
            return [
                decode_model(ReconciliationRecord, row[0], what="reconciliation") for row in rows
            ]

        return await self._db.read(read)

    async def storage_read_outbox(
        self, thread_id: str | None, turn_id: str | None, after_position: int, limit: int
    ) -> list[StoredEvent]:
        def read(conn: sqlite3.Connection) -> list[StoredEvent]:
            clauses, args = _filters(thread_id=thread_id, turn_id=turn_id)
            clauses += " AND position > ?" if clauses else " WHERE position > ?"
            rows = conn.execute(
                f"SELECT {EVENT_COLUMNS}{clauses} ORDER BY position LIMIT ?",
                (*args, after_position, limit),
            ).fetchall()
            return [stored_event(row) for row in rows]

        return await self._db.read(read)


def _listed_receipt(row: tuple[Any, ...]) -> EffectReceipt:
    """A receipt for a listing (``RECEIPT_COLUMNS``); a corrupt one as a placeholder with its
    row's status, so one bad row does not hide every other receipt."""
    thread_id, key, receipt_id, capability_id, status, updated_us, text = row
    try:
        return decode_model(EffectReceipt, text, what="receipt", thread_id=thread_id)
    except CheckpointCorruptError as exc:
        return unreadable_receipt(
            thread_id=thread_id,
            idempotency_key=key,
            reason=unreadable(exc),
            status=ReceiptStatus(status),
            receipt_id=receipt_id,
            capability_id=capability_id,
            updated_at=_EPOCH + timedelta(microseconds=updated_us),
        )


def _last_reconciliation(
    conn: sqlite3.Connection, thread_id: str, idempotency_key: str
) -> ReconciliationRecord | None:
    row = conn.execute(
        "SELECT CAST(document AS BLOB) FROM ik_reconciliations"
        " WHERE thread_id = ? AND idempotency_key = ? ORDER BY seq DESC LIMIT 1",
        (thread_id, idempotency_key),
    ).fetchone()
    if row is None:
        return None
    return decode_model(ReconciliationRecord, row[0], what="reconciliation")


def _filters(**equal: str | None) -> tuple[str, tuple[str, ...]]:
    """``WHERE a = ? AND b = ?`` for the given non-``None`` columns (names are ours)."""
    chosen = [(column, value) for column, value in equal.items() if value is not None]
    if not chosen:
        return "", ()
    clause = " WHERE " + " AND ".join(f"{column} = ?" for column, _ in chosen)
    return clause, tuple(value for _, value in chosen)
