from __future__ import annotations

import asyncio

import pytest

from intention_kernel.contracts.errors import ConfigurationError
from intention_kernel.durability.factory import open_durability
from intention_kernel.durability.memory import MemoryDurability
from intention_kernel.durability.postgres import PostgresDurability
from tests.support.postgres import drop_schema, require_postgres, scratch_schema


async def test_memory_url_opens_the_memory_adapter() -> None:
    store = await open_durability("memory://")
    assert isinstance(store, MemoryDurability)


def test_postgresql_url_opens_the_postgres_adapter() -> None:
    dsn = require_postgres()
    schema = scratch_schema()

    async def main() -> None:
        store = await open_durability(dsn, schema=schema, setup=True)
        try:
            assert isinstance(store, PostgresDurability)
        finally:
            await store.close()
            await drop_schema(dsn, schema)

    asyncio.run(main())


async def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        await open_durability("mysql://x")
