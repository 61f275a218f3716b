"""Reading the PostgreSQL store back: turns, checkpoints, receipts, audit records, outbox.

``PostgresHistory`` is the ``HistoryStorage`` role (the facade has checked the arguments).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.codec import JsonLimits
from ...contracts.errors import CheckpointCorruptError, LeaseLostError
from ...contracts.events import StoredEvent
from ...contracts.receipts import EffectReceipt, ReceiptStatus, ReconciliationRecord
from ...contracts.turns import DurableTurnResult
from .._documents import (
    PRUNED_TURN,
    decode_model,
    decode_turn,
    encode_model,
    unreadable,
    unreadable_receipt,
)
from .._ledger import resolve_uncertain
from .._writes import utc_now
from ..storage import Reconciliation
from ._connection import PgConnection
from ._errors import retrying
from ._heads import HeadTexts
from ._inspect import lease_free
from ._lease import PgLease
from ._outbox import stored_event
from ._outbox_sql import EVENT_COLUMNS
from ._sql import Statements

__all__ = ["PostgresHistory", "last_reconciliation", "listed_receipt"]

_RECEIPT_COLUMNS = "thread_id, idempotency_key, id, status, updated_at, receipt"


def listed_receipt(row: Any) -> EffectReceipt:
    """A receipt for a listing; a corrupt one as a placeholder with its row's status, so one
    bad row does not hide every other receipt."""
    try:
        return decode_model(
            EffectReceipt, row["receipt"], what="receipt", thread_id=row["thread_id"]
        )
    except CheckpointCorruptError as exc:
        return unreadable_receipt(
            thread_id=row["thread_id"],
            idempotency_key=row["idempotency_key"],
            reason=unreadable(exc),
            status=ReceiptStatus(row["status"]),
            receipt_id=row["id"],
            updated_at=row["updated_at"],
        )


async def last_reconciliation(
    conn: Any, schema: str, thread_id: str, idempotency_key: str
) -> ReconciliationRecord | None:
    """The key's latest audit record (a correction must name the one it corrects)."""
    text = await conn.fetchval(
        f'SELECT record FROM "{schema}".reconciliations'
        " WHERE thread_id = $1 AND idempotency_key = $2 ORDER BY position DESC LIMIT 1",
        thread_id,
        idempotency_key,
    )
    return None if text is None else decode_model(ReconciliationRecord, text, what="reconciliation")


class PostgresHistory:
    """``HistoryStorage`` on PostgreSQL: plain reads (no lease, no transaction), and the
    reconcile transaction. Listings read ``reads`` (a hot standby's pool, may lag: see
    ``_replica``); the checkpoint a thread goes on from and the reconcile, the primary."""

    def __init__(
        self,
        db: PgConnection,
        sql: Statements,
        heads: HeadTexts,
        *,
        json_limits: JsonLimits,
        clock: Callable[[], datetime] = utc_now,
        reads: PgConnection | None = None,
    ) -> None:
        self._db = db
        self._reads = db if reads is None else reads
        self._sql = sql
        self._heads = heads
        self.schema = db.schema
        self.json_limits = json_limits
        self._clock = clock

    async def load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        row = await self._db.fetchrow(self._sql.load, thread_id, "")
        return self._heads.checkpoint(row, thread_id)

    async def list_turns(
        self, thread_id: str, after_revision: int, limit: int
    ) -> list[DurableTurnResult]:
        rows = await self._reads.fetch(
            f'SELECT turn_id, result FROM "{self.schema}".turns'
            " WHERE thread_id = $1 AND revision > $2 AND result <> $4"
            " ORDER BY revision LIMIT $3",
            thread_id,
            after_revision,
            limit,
            PRUNED_TURN,
        )
        return [decode_turn(r["result"], thread_id=thread_id, turn_id=r["turn_id"]) for r in rows]

    async def list_receipts(
        self, status: ReceiptStatus | None, thread_id: str | None, limit: int
    ) -> list[EffectReceipt]:
        """Oldest update first; ``status=UNCERTAIN`` reads the partial index, plus the
        ``prepared`` receipts of threads without a live lease (interrupted), as stored."""
        if status is ReceiptStatus.UNCERTAIN:
            return await self._awaiting_operator(thread_id, limit)
        where: list[str] = []
        args: list[Any] = []
        if status is not None:
            # A literal (not a parameter) so the planner can use the partial index.
            where.append(f"status = '{status.value}'")
        if thread_id is not None:
            args.append(thread_id)
            where.append(f"thread_id = ${len(args)}")
        args.append(limit)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = await self._reads.fetch(
            f'SELECT {_RECEIPT_COLUMNS} FROM "{self.schema}".receipts {clause}'
            f" ORDER BY updated_at, id LIMIT ${len(args)}",
            *args,
        )
        return [listed_receipt(r) for r in rows]

    async def _awaiting_operator(self, thread_id: str | None, limit: int) -> list[EffectReceipt]:
        s = f'"{self.schema}"'
        args: list[Any] = [limit]
        only = ""
        if thread_id is not None:
            args.append(thread_id)
            only = " AND r.thread_id = $2"
        # Two ordered, limited branches: the first keeps to the partial index on 'uncertain';
        # the second finds the prepared receipts whose turn is not running any more.
        rows = await self._reads.fetch(
            f"""SELECT {_RECEIPT_COLUMNS} FROM (
                (SELECT {_RECEIPT_COLUMNS} FROM {s}.receipts r
                  WHERE r.status = 'uncertain'{only} ORDER BY r.updated_at, r.id LIMIT $1)
                UNION ALL
                (SELECT {_RECEIPT_COLUMNS} FROM {s}.receipts r
                  WHERE r.status = 'prepared'{only} AND {lease_free(s)}
                  ORDER BY r.updated_at, r.id LIMIT $1)
            ) AS u ORDER BY updated_at, id LIMIT $1""",
            *args,
        )
        return [listed_receipt(r) for r in rows]

    async def reconciliations(
        self, thread_id: str | None, idempotency_key: str | None
    ) -> list[ReconciliationRecord]:
        where: list[str] = []
        args: list[Any] = []
        if thread_id is not None:
            args.append(thread_id)
            where.append(f"thread_id = ${len(args)}")
        if idempotency_key is not None:
            args.append(idempotency_key)
            where.append(f"idempotency_key = ${len(args)}")
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = await self._reads.fetch(
            f'SELECT record FROM "{self.schema}".reconciliations {clause} ORDER BY position',
            *args,
        )
        return [
            decode_model(ReconciliationRecord, r["record"], what="reconciliation") for r in rows
        ]

    async def read_outbox(
        self, thread_id: str | None, turn_id: str | None, after_position: int, limit: int
    ) -> list[StoredEvent]:
        """Events by ``position``. Positions are unique; across threads a lower position can
        become visible after a higher one (concurrent commits), so a reader should keep a
        cursor per thread. A thread's own order is ``StoredEvent.thread_order`` (one database
        numbers positions in it too)."""
        args: list[Any] = [after_position]
        where = ["position > $1"]
        if thread_id is not None:
            args.append(thread_id)
            where.append(f"thread_id = ${len(args)}")
        if turn_id is not None:
            args.append(turn_id)
            where.append(f"turn_id = ${len(args)}")
        args.append(limit)
        rows = await self._reads.fetch(
            f'SELECT {EVENT_COLUMNS} FROM "{self.schema}".outbox'
            f" WHERE {' AND '.join(where)} ORDER BY position LIMIT ${len(args)}",
            *args,
        )
        return [stored_event(r) for r in rows]

    async def reconcile(self, decision: Reconciliation, lease: PgLease | None) -> EffectReceipt:
        s = f'"{self.schema}"'
        thread_id, idempotency_key = decision.thread_id, decision.idempotency_key

        async def transaction() -> EffectReceipt:
            async with self._db.lanes.connection() as conn, conn.transaction():
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
                    now=self._clock(),
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
