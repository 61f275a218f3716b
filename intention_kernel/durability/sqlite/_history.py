"""``SQLiteHistory``: the ``HistoryStorage`` role of the embedded store (reads, reconcile)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.codec import JsonLimits
from ...contracts.errors import CheckpointCorruptError
from ...contracts.events import StoredEvent
from ...contracts.receipts import (
    EffectReceipt,
    ReceiptStatus,
    ReconciliationRecord,
)
from ...contracts.turns import DurableTurnResult
from .._documents import (
    PRUNED_TURN,
    OwnTexts,
    decode_model,
    decode_turn,
    encode_model,
    unreadable,
    unreadable_receipt,
)
from .._ledger import resolve_uncertain
from .._writes import utc_now
from ..storage import Reconciliation
from ._connection import Connection
from ._inspect import RECEIPT_COLUMNS, awaiting_operator, lease_probe
from ._lease import LockFiles
from ._outbox import EVENT_COLUMNS, stored_event
from ._turns import SQLiteLease, fenced_write, put_receipt, read_head, read_receipt

__all__ = ["SQLiteHistory"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SQLiteHistory:
    """``HistoryStorage`` over one SQLite ``Connection`` (and the lock files, whose holders
    tell interrupted ``prepared`` receipts from running ones)."""

    def __init__(
        self,
        db: Connection,
        locks: LockFiles,
        own: OwnTexts,
        *,
        json_limits: JsonLimits,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._db = db
        self._locks = locks
        self._own = own
        self.json_limits = json_limits
        self._clock = clock

    async def reconcile(self, decision: Reconciliation, lease: SQLiteLease | None) -> EffectReceipt:
        thread_id, key = decision.thread_id, decision.idempotency_key

        def reconcile(conn: sqlite3.Connection) -> EffectReceipt:
            last = _last_reconciliation(conn, thread_id, key) if decision.correct else None
            receipt, record = resolve_uncertain(
                read_receipt(conn, thread_id, key),
                decision.outcome,
                thread_id=thread_id,
                idempotency_key=key,
                value=decision.value,
                note=decision.note,
                actor=decision.actor,
                now=self._clock(),
                holds_lease=lease is not None,
                correct=decision.correct,
                last=last,
            )
            put_receipt(conn, receipt, self.json_limits)
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
        return await fenced_write(self._db, lease, reconcile)

    async def load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        own = self._own
        return await self._db.read(lambda conn: read_head(conn, thread_id, own))

    async def list_turns(
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

    async def list_receipts(
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

    async def reconciliations(
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

    async def read_outbox(
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
