"""The turn inbox conformance suite, and its schedule part, on every store: memory, SQLite
and PostgreSQL."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from intention_kernel.durability.postgres import PostgresDurability, admin_connection
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing import MemoryDurability, MemoryStore
from intention_kernel.testing.conformance.inbox import (
    UNREADABLE_PAYLOAD,
    InboxConformance,
    InboxHarness,
    InboxStore,
    ScheduleConformance,
)
from tests.support.postgres import drop_schema, scratch_schema


class MemoryInboxHarness(InboxHarness):
    """Every ``open`` is a new store over one shared ``MemoryStore``."""

    durable = False

    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()

    async def _open(self) -> InboxStore:
        return MemoryDurability(self.store)

    async def corrupt_request(
        self, thread_id: str, turn_id: str, payload: str = UNREADABLE_PAYLOAD
    ) -> None:
        self.store.inbox[(thread_id, turn_id)]["payload"] = payload


class SQLiteInboxHarness(InboxHarness):
    """Every ``open`` is a new store on the same file, as a restarted process would be."""

    claim_ttl = 0.3

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.path = directory / "inbox.db"

    async def _open(self) -> InboxStore:
        return await SQLiteDurability.open(self.path)

    async def corrupt_request(
        self, thread_id: str, turn_id: str, payload: str = UNREADABLE_PAYLOAD
    ) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            changed = conn.execute(
                "UPDATE ik_inbox SET payload = ? WHERE thread_id = ? AND turn_id = ?",
                (payload, thread_id, turn_id),
            ).rowcount
        finally:
            conn.close()
        assert changed == 1


class PostgresInboxHarness(InboxHarness):
    """One scratch schema per test; every ``open`` is a new pool, as a restarted worker."""

    claim_ttl = 0.3

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self.dsn = dsn
        self.schema = scratch_schema("ik_inbox")
        self._created = False

    async def _open(self) -> InboxStore:
        store = await PostgresDurability.open(
            self.dsn, schema=self.schema, setup=not self._created, min_size=0, max_size=4
        )
        self._created = True
        return store

    async def _cleanup(self) -> None:
        if self._created:
            await drop_schema(self.dsn, self.schema)

    async def corrupt_request(
        self, thread_id: str, turn_id: str, payload: str = UNREADABLE_PAYLOAD
    ) -> None:
        async with admin_connection(self.dsn) as conn:
            status = await conn.execute(
                f'UPDATE "{self.schema}".inbox SET payload = $1'
                " WHERE thread_id = $2 AND turn_id = $3",
                payload,
                thread_id,
                turn_id,
            )
        assert status == "UPDATE 1", status


class TestMemoryInbox(InboxConformance):
    @pytest.fixture
    def inbox_harness(self) -> MemoryInboxHarness:
        return MemoryInboxHarness()


class TestSQLiteInbox(InboxConformance):
    @pytest.fixture
    def inbox_harness(self, tmp_path: Path) -> SQLiteInboxHarness:
        return SQLiteInboxHarness(tmp_path)


class TestPostgresInbox(InboxConformance):
    @pytest.fixture
    def inbox_harness(self, dsn: str) -> PostgresInboxHarness:
        return PostgresInboxHarness(dsn)


class TestMemorySchedules(ScheduleConformance):
    @pytest.fixture
    def inbox_harness(self) -> MemoryInboxHarness:
        return MemoryInboxHarness()


class TestSQLiteSchedules(ScheduleConformance):
    @pytest.fixture
    def inbox_harness(self, tmp_path: Path) -> SQLiteInboxHarness:
        return SQLiteInboxHarness(tmp_path)


class TestPostgresSchedules(ScheduleConformance):
    @pytest.fixture
    def inbox_harness(self, dsn: str) -> PostgresInboxHarness:
        return PostgresInboxHarness(dsn)
