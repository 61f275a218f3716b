"""PostgreSQL fixtures shared by the store tests (requested only by the tests that use them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from intention_kernel.durability.postgres import PostgresDurability
from tests.support.postgres import drop_schema, require_postgres, scratch_schema


@pytest.fixture(scope="module")
def dsn() -> str:
    return require_postgres()


@pytest.fixture
async def schema(dsn: str) -> AsyncIterator[str]:
    """A scratch schema name, dropped afterwards."""
    name = scratch_schema()
    yield name
    await drop_schema(dsn, name)


async def open_store(dsn: str, schema: str, **options: Any) -> PostgresDurability:
    """A migrated store on ``schema`` with a small pool."""
    options.setdefault("max_size", 3)
    return await PostgresDurability.open(dsn, schema=schema, setup=True, **options)
