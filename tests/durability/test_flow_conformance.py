"""The budget counter and provider slot conformance suite on every store."""

from __future__ import annotations

from pathlib import Path

import pytest

from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing import MemoryDurability, MemoryStore
from intention_kernel.testing.conformance.flow import FlowConformance, FlowHarness, FlowStore
from tests.support.postgres import drop_schema, scratch_schema


class MemoryFlowHarness(FlowHarness):
    """Every ``open`` is a new store over one shared ``MemoryStore``."""

    durable = False

    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()

    async def _open(self) -> FlowStore:
        return MemoryDurability(self.store)


class SQLiteFlowHarness(FlowHarness):
    """Every ``open`` is a new connection to the same file, as another process's would be."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.path = directory / "flow.db"

    async def _open(self) -> FlowStore:
        return await SQLiteDurability.open(self.path)


class PostgresFlowHarness(FlowHarness):
    """One scratch schema per test; every ``open`` is a new pool."""

    machine_examples = 6

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self.dsn = dsn
        self.schema = scratch_schema("ik_flow")
        self._created = False

    async def _open(self) -> FlowStore:
        store = await PostgresDurability.open(
            self.dsn, schema=self.schema, setup=not self._created, min_size=0, max_size=4
        )
        self._created = True
        return store

    async def _cleanup(self) -> None:
        if self._created:
            await drop_schema(self.dsn, self.schema)


class TestMemoryFlow(FlowConformance):
    @pytest.fixture
    def flow_harness(self) -> MemoryFlowHarness:
        return MemoryFlowHarness()


class TestSQLiteFlow(FlowConformance):
    @pytest.fixture
    def flow_harness(self, tmp_path: Path) -> SQLiteFlowHarness:
        return SQLiteFlowHarness(tmp_path)


class TestPostgresFlow(FlowConformance):
    @pytest.fixture
    def flow_harness(self, dsn: str) -> PostgresFlowHarness:
        return PostgresFlowHarness(dsn)
