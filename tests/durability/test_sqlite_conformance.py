from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from intention_kernel.contracts import DurabilityStore
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing.conformance import ConformanceHarness, DurabilityConformance


class SQLiteHarness(ConformanceHarness):
    """Every ``open`` is a new adapter on the same file, as a restarted process would be."""

    stateful_examples = 25

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.path = directory / "store.db"

    async def _open(self, *, lock_timeout: float) -> DurabilityStore:
        return await SQLiteDurability.open(self.path, lock_timeout=lock_timeout)

    async def revoke_lease(self, thread_id: str) -> None:
        # Another holder taking over and writing moves the epoch (creating the row for a thread
        # that never wrote), so the current holder is fenced whether or not it wrote already.
        with sqlite3.connect(self.path, isolation_level=None) as conn:
            conn.execute(
                "INSERT INTO ik_leases (thread_id, epoch) VALUES (?, 1)"
                " ON CONFLICT (thread_id) DO UPDATE SET epoch = epoch + 1",
                (thread_id,),
            )
        conn.close()

    def _write(self, sql: str, *args: object) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            assert conn.execute(sql, args).rowcount == 1
        finally:
            conn.close()

    async def corrupt_turn(self, thread_id: str, turn_id: str, text: str) -> None:
        self._write(
            "UPDATE ik_turns SET result = ? WHERE thread_id = ? AND turn_id = ?",
            text,
            thread_id,
            turn_id,
        )

    async def corrupt_receipt(self, thread_id: str, idempotency_key: str, text: str) -> None:
        self._write(
            "UPDATE ik_receipts SET document = ? WHERE thread_id = ? AND idempotency_key = ?",
            text,
            thread_id,
            idempotency_key,
        )

    async def corrupt_event(self, position: int, text: str) -> None:
        self._write("UPDATE ik_outbox SET document = ? WHERE position = ?", text, position)


class TestSQLiteConformance(DurabilityConformance):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> SQLiteHarness:
        return SQLiteHarness(tmp_path)
