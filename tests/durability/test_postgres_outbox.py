"""The PostgreSQL adapter as an ``OutboxSource``: the shared suite on a scratch schema, plus
what is PostgreSQL's own (positions only ordered within a thread, upgrade from schema 1,
concurrent relays, the relay command)."""

from __future__ import annotations

import pytest

from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.testing.outbox_conformance import (
    OutboxHarness,
    OutboxSourceConformance,
    OutboxStore,
)
from intention_kernel.testing.postgres import drop_schema, require_postgres, scratch_schema


@pytest.fixture(scope="module")
def dsn() -> str:
    return require_postgres()


class PostgresOutboxHarness(OutboxHarness):
    """One scratch schema per test; every ``open`` is a new pool, as a restarted relay."""

    claim_ttl = 0.3

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self.dsn = dsn
        self.schema = scratch_schema("ik_outbox")
        self._created = False

    async def _open(self) -> OutboxStore:
        store = await PostgresDurability.open(
            self.dsn, schema=self.schema, setup=not self._created, min_size=0, max_size=4
        )
        self._created = True
        return store

    async def _cleanup(self) -> None:
        if self._created:
            await drop_schema(self.dsn, self.schema)


class TestPostgresOutbox(OutboxSourceConformance):
    @pytest.fixture
    def outbox_harness(self, dsn: str) -> PostgresOutboxHarness:
        return PostgresOutboxHarness(dsn)
