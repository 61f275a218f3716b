"""Reading the PostgreSQL store back: turns, checkpoints, receipts, audit records, outbox.

A mixin of ``PostgresDurability``: the read hooks of the engine, which has checked the
arguments already. Plain reads, no lease, no transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.errors import CheckpointCorruptError
from ...contracts.events import StoredEvent
from ...contracts.receipts import EffectReceipt, ReceiptStatus, ReconciliationRecord
from ...contracts.turns import DurableTurnResult
from .._documents import (
    PRUNED_TURN,
    decode_model,
    decode_turn,
    unreadable,
    unreadable_receipt,
)
from ..engine import StoredTurn
from ._inspect import lease_free
from ._outbox import EVENT_COLUMNS, stored_event
from ._sql import Statements

__all__ = ["PostgresReads", "last_reconciliation", "listed_receipt"]

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


class PostgresReads:
    schema: str
    _sql: Statements

    if TYPE_CHECKING:

        async def _fetchrow(self, sql: str, *args: Any) -> Any: ...

        async def _fetch(self, sql: str, *args: Any) -> list[Any]: ...

        def _head(self, row: Any, thread_id: str) -> KernelCheckpoint | None: ...

    async def storage_load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        row = await self._fetchrow(self._sql.load, thread_id, "")
        return self._head(row, thread_id)

    async def storage_read_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        row = await self._fetchrow(self._sql.find_turn, thread_id, turn_id)
        if row is None:
            return None
        result = decode_turn(row["result"], thread_id=thread_id, turn_id=turn_id)
        return StoredTurn(result, row["fingerprint"])

    async def storage_list_turns(
        self, thread_id: str, after_revision: int, limit: int
    ) -> list[DurableTurnResult]:
        rows = await self._fetch(
            f'SELECT turn_id, result FROM "{self.schema}".turns'
            " WHERE thread_id = $1 AND revision > $2 AND result <> $4"
            " ORDER BY revision LIMIT $3",
            thread_id,
            after_revision,
            limit,
            PRUNED_TURN,
        )
        return [decode_turn(r["result"], thread_id=thread_id, turn_id=r["turn_id"]) for r in rows]

    async def storage_get_receipt(
        self, thread_id: str, idempotency_key: str
    ) -> EffectReceipt | None:
        row = await self._fetchrow(
            f'SELECT receipt FROM "{self.schema}".receipts'
            " WHERE thread_id = $1 AND idempotency_key = $2",
            thread_id,
            idempotency_key,
        )
        if row is None:
            return None
        return decode_model(EffectReceipt, row["receipt"], what="receipt", thread_id=thread_id)

    async def storage_list_receipts(
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
        rows = await self._fetch(
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
        rows = await self._fetch(
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

    async def storage_reconciliations(
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
        rows = await self._fetch(
            f'SELECT record FROM "{self.schema}".reconciliations {clause} ORDER BY position',
            *args,
        )
        return [
            decode_model(ReconciliationRecord, r["record"], what="reconciliation") for r in rows
        ]

    async def storage_read_outbox(
        self, thread_id: str | None, turn_id: str | None, after_position: int, limit: int
    ) -> list[StoredEvent]:
        """Events by ``position``. Positions are unique and ordered within a thread; across
        threads a lower position can become visible after a higher one (concurrent commits),
        so a relay should keep a cursor per thread."""
        args: list[Any] = [after_position]
        where = ["position > $1"]
        if thread_id is not None:
            args.append(thread_id)
            where.append(f"thread_id = ${len(args)}")
        if turn_id is not None:
            args.append(turn_id)
            where.append(f"turn_id = ${len(args)}")
        args.append(limit)
        rows = await self._fetch(
            f'SELECT {EVENT_COLUMNS} FROM "{self.schema}".outbox'
            f" WHERE {' AND '.join(where)} ORDER BY position LIMIT ${len(args)}",
            *args,
        )
        return [stored_event(r) for r in rows]
