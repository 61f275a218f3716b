"""``PostgresEffects``: the effect ledger statements of ``PostgresTurns``.

Each receipt write is one fenced statement: it lands only while the turn's lease is held (the
epoch and owner token are checked in the statement itself, see ``_sql``), so a turn that lost
its lease cannot record an effect. ``PostgresTurns`` serves ``begin_effect``, ``finish_effect``
and ``get_receipt`` of the ``TurnStorage`` role through this object.
"""

from __future__ import annotations

from datetime import datetime

from ...contracts.codec import JsonLimits
from ...contracts.errors import DurabilityError, ErrorCode, LeaseLostError
from ...contracts.receipts import EffectIdentity, EffectReceipt, ReceiptStatus
from .._documents import decode_model, encode_model
from .._ledger import EffectStart, start_effect
from ._connection import PgConnection
from ._lease import PgLease
from ._sql import Statements

__all__ = ["PostgresEffects"]


class PostgresEffects:
    """Receipts on PostgreSQL: prepared with one statement, finished with a compare-and-set."""

    def __init__(self, db: PgConnection, sql: Statements, *, json_limits: JsonLimits) -> None:
        self._db = db
        self._sql = sql
        self.json_limits = json_limits

    async def begin_effect(
        self, lease: PgLease, turn_id: str, identity: EffectIdentity, now: datetime
    ) -> EffectStart:
        thread_id, key = lease.thread_id, identity.idempotency_key
        # A new key (the usual case): ``prepared`` is inserted unless the key exists, one
        # statement; the stored receipt comes back with a conflict.
        start = start_effect(None, identity, thread_id=thread_id, turn_id=turn_id, now=now)
        receipt = start.receipt
        with lease.write():
            row = await self._db.fetchrow(
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
                row = await self._db.fetchrow(
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

    async def finish_effect(
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
            row = await self._db.fetchrow(
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

    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        row = await self._db.fetchrow(
            f'SELECT receipt FROM "{self._db.schema}".receipts'
            " WHERE thread_id = $1 AND idempotency_key = $2",
            thread_id,
            idempotency_key,
        )
        if row is None:
            return None
        return decode_model(EffectReceipt, row["receipt"], what="receipt", thread_id=thread_id)
