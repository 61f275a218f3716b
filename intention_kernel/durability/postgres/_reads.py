"""Reading the PostgreSQL store back: turns, checkpoints, receipts, audit records, outbox.

A mixin of ``PostgresDurability``; plain reads, no lease, no transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.events import StoredEvent
from ...contracts.ids import validate_idempotency_key, validate_thread_id, validate_turn_id
from ...contracts.receipts import EffectReceipt, ReceiptStatus, ReconciliationRecord
from ...contracts.turns import DurableTurnResult
from .._documents import PRUNED_TURN, decode_model, decode_turn
from .._listing import check_limit
from ._inspect import lease_free
from ._outbox import stored_event
from ._sql import Statements

__all__ = ["PostgresReads"]


class PostgresReads:
    schema: str
    _sql: Statements

    if TYPE_CHECKING:

        async def _fetchrow(self, sql: str, *args: Any) -> Any: ...

        async def _fetch(self, sql: str, *args: Any) -> list[Any]: ...

        def _check_open(self) -> None: ...

        def _head(self, row: Any, thread_id: str) -> KernelCheckpoint | None: ...

    async def load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        validate_thread_id(thread_id)
        self._check_open()
        row = await self._fetchrow(self._sql.load, thread_id, "")
        return self._head(row, thread_id)

    async def get_turn(self, thread_id: str, turn_id: str) -> DurableTurnResult | None:
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        self._check_open()
        row = await self._fetchrow(self._sql.find_turn, thread_id, turn_id)
        if row is None:
            return None
        return decode_turn(row["result"], thread_id=thread_id, turn_id=turn_id)

    async def list_turns(
        self, thread_id: str, *, after_revision: int = 0, limit: int = 100
    ) -> list[DurableTurnResult]:
        validate_thread_id(thread_id)
        check_limit(limit)
        self._check_open()
        rows = await self._fetch(
            f'SELECT turn_id, result FROM "{self.schema}".turns'
            " WHERE thread_id = $1 AND revision > $2 AND result <> $4"
            " ORDER BY revision LIMIT $3",
            thread_id,
            int(after_revision),
            limit,
            PRUNED_TURN,
        )
        return [decode_turn(r["result"], thread_id=thread_id, turn_id=r["turn_id"]) for r in rows]

    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        validate_thread_id(thread_id)
        validate_idempotency_key(idempotency_key)
        self._check_open()
        row = await self._fetchrow(
            f'SELECT receipt FROM "{self.schema}".receipts'
            " WHERE thread_id = $1 AND idempotency_key = $2",
            thread_id,
            idempotency_key,
        )
        if row is None:
            return None
        return decode_model(EffectReceipt, row["receipt"], what="receipt", thread_id=thread_id)

    async def list_receipts(
        self,
        *,
        status: ReceiptStatus | None = None,
        thread_id: str | None = None,
        limit: int = 100,
    ) -> list[EffectReceipt]:
        """Oldest update first; ``status=UNCERTAIN`` reads the partial index, plus the
        ``prepared`` receipts of threads without a live lease (interrupted), as stored."""
        check_limit(limit)
        if thread_id is not None:
            validate_thread_id(thread_id)
        self._check_open()
        if status is not None and ReceiptStatus(status) is ReceiptStatus.UNCERTAIN:
            return await self._awaiting_operator(thread_id, limit)
        where: list[str] = []
        args: list[Any] = []
        if status is not None:
            chosen = ReceiptStatus(status)
            # A literal (not a parameter) so the planner can use the partial index.
            where.append(f"status = '{chosen.value}'")
        if thread_id is not None:
            args.append(thread_id)
            where.append(f"thread_id = ${len(args)}")
        args.append(limit)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = await self._fetch(
            f'SELECT thread_id, receipt FROM "{self.schema}".receipts {clause}'
            f" ORDER BY updated_at, id LIMIT ${len(args)}",
            *args,
        )
        return [
            decode_model(EffectReceipt, r["receipt"], what="receipt", thread_id=r["thread_id"])
            for r in rows
        ]

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
            f"""SELECT thread_id, receipt FROM (
                (SELECT r.thread_id, r.receipt, r.updated_at, r.id FROM {s}.receipts r
                  WHERE r.status = 'uncertain'{only} ORDER BY r.updated_at, r.id LIMIT $1)
                UNION ALL
                (SELECT r.thread_id, r.receipt, r.updated_at, r.id FROM {s}.receipts r
                  WHERE r.status = 'prepared'{only} AND {lease_free(s)}
                  ORDER BY r.updated_at, r.id LIMIT $1)
            ) AS u ORDER BY updated_at, id LIMIT $1""",
            *args,
        )
        return [
            decode_model(EffectReceipt, r["receipt"], what="receipt", thread_id=r["thread_id"])
            for r in rows
        ]

    async def reconciliations(
        self, *, thread_id: str | None = None, idempotency_key: str | None = None
    ) -> list[ReconciliationRecord]:
        self._check_open()
        where: list[str] = []
        args: list[Any] = []
        if thread_id is not None:
            args.append(validate_thread_id(thread_id))
            where.append(f"thread_id = ${len(args)}")
        if idempotency_key is not None:
            args.append(validate_idempotency_key(idempotency_key))
            where.append(f"idempotency_key = ${len(args)}")
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = await self._fetch(
            f'SELECT record FROM "{self.schema}".reconciliations {clause} ORDER BY position',
            *args,
        )
        return [
            decode_model(ReconciliationRecord, r["record"], what="reconciliation") for r in rows
        ]

    async def read_outbox(
        self,
        *,
        thread_id: str | None = None,
        turn_id: str | None = None,
        after_position: int = 0,
        limit: int = 1000,
    ) -> list[StoredEvent]:
        """Events by ``position``. Positions are unique and ordered within a thread; across
        threads a lower position can become visible after a higher one (concurrent commits),
        so a relay should keep a cursor per thread."""
        check_limit(limit, maximum=10_000)
        self._check_open()
        args: list[Any] = [int(after_position)]
        where = ["position > $1"]
        if thread_id is not None:
            args.append(validate_thread_id(thread_id))
            where.append(f"thread_id = ${len(args)}")
        if turn_id is not None:
            args.append(validate_turn_id(turn_id))
            where.append(f"turn_id = ${len(args)}")
        args.append(limit)
        rows = await self._fetch(
            "SELECT position, event, delivered_at, attempts, last_error, dead"
            f' FROM "{self.schema}".outbox'
            f" WHERE {' AND '.join(where)} ORDER BY position LIMIT ${len(args)}",
            *args,
        )
        return [stored_event(r) for r in rows]
