from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.postgres import drop_schema, require_postgres, scratch_schema


@pytest.fixture(scope="module")
def dsn() -> str:
    return require_postgres()


@pytest.fixture
async def schema(dsn: str) -> AsyncIterator[str]:
    """A migrated scratch schema, dropped afterwards."""
    from intention_kernel.durability.postgres import PostgresDurability

    name = scratch_schema("ik_fault")
    store = await PostgresDurability.open(dsn, schema=name, setup=True, max_size=1)
    await store.close()
    yield name
    await drop_schema(dsn, name)
