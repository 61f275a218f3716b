from __future__ import annotations

import pytest

from intention_kernel.durability.postgres import admin_connection
from intention_kernel.testing.conformance import DurabilityConformance
from tests.support.postgres import PostgresHarness


class CorruptiblePostgresHarness(PostgresHarness):
    """The shared harness, plus raw writes into the real schema for the poison-data tests."""

    async def _write(self, sql: str, *args: object) -> None:
        async with admin_connection(self.dsn) as conn:
            status = await conn.execute(sql.format(s=f'"{self.schema}"'), *args)
        assert status == "UPDATE 1", status

    async def corrupt_turn(self, thread_id: str, turn_id: str, text: str) -> None:
        await self._write(
            "UPDATE {s}.turns SET result = $1 WHERE thread_id = $2 AND turn_id = $3",
            text,
            thread_id,
            turn_id,
        )

    async def corrupt_receipt(self, thread_id: str, idempotency_key: str, text: str) -> None:
        await self._write(
            "UPDATE {s}.receipts SET receipt = $1 WHERE thread_id = $2 AND idempotency_key = $3",
            text,
            thread_id,
            idempotency_key,
        )

    async def corrupt_event(self, position: int, text: str) -> None:
        await self._write("UPDATE {s}.outbox SET event = $1 WHERE position = $2", text, position)


class TestPostgresConformance(DurabilityConformance):
    @pytest.fixture
    def harness(self, dsn: str) -> PostgresHarness:
        return CorruptiblePostgresHarness(dsn)
