"""Each adapter package opens and reads the store its URL names (``from_location``,
``schema_info_at``): the factory's scheme table only picks the package, so a store opened
through the package behaves as one opened by ``open_durability``."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from intention_kernel.contracts.errors import ConfigurationError
from intention_kernel.durability import memory, postgres, sqlite
from intention_kernel.durability.factory import (
    SUPPORTED_SCHEMES,
    describe_store,
    open_durability,
    sqlite_url,
)
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.durability.sqlite import SQLiteDurability
from tests.support.postgres import drop_schema, require_postgres, scratch_schema


def test_the_schemes_are_unchanged() -> None:
    assert SUPPORTED_SCHEMES == ("memory", "sqlite", "postgresql", "postgres")


async def test_memory_from_its_location() -> None:
    location = describe_store("memory://?lock_timeout=4")
    store = await memory.from_location(location, location.options)
    try:
        assert isinstance(store, memory.MemoryDurability)
        assert store.lock_timeout == 4.0
    finally:
        await store.close()
    assert (await memory.schema_info_at(describe_store("memory://"))).version == 0


async def test_sqlite_from_its_location(tmp_path: Path) -> None:
    location = describe_store(sqlite_url(tmp_path / "app.db"))
    assert (await sqlite.schema_info_at(location)).version == 0  # nothing there yet
    store = await sqlite.from_location(location, {"busy_timeout": 2.0})
    try:
        assert isinstance(store, SQLiteDurability)
    finally:
        await store.close()
    info = await sqlite.schema_info_at(location)
    assert info.version > 0 and info.pending == ()


@pytest.fixture
def dsn() -> str:
    return require_postgres()


async def test_postgres_from_its_location(dsn: str) -> None:
    schema = scratch_schema("ik_schemes")
    location = describe_store(f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}")
    try:
        assert (await postgres.schema_info_at(location)).version == 0
        settings = {**location.options, "setup": True, "max_size": 2}
        store = await postgres.from_location(location, settings)
        try:
            assert isinstance(store, PostgresDurability) and store.schema == schema
        finally:
            await store.close()
        assert (await postgres.schema_info_at(location)).pending == ()
    finally:
        await drop_schema(dsn, schema)


@pytest.mark.parametrize(
    ("package", "url"),
    [
        (memory, "memory://"),
        (sqlite, "sqlite:////tmp/ik-schemes-never-created.db"),
        (postgres, "postgresql://postgres@127.0.0.1/test"),
    ],
)
async def test_a_package_refuses_an_option_as_the_factory_does(
    package: ModuleType, url: str
) -> None:
    options: dict[str, Any] = {"bogus": 1}
    with pytest.raises(ConfigurationError) as direct:
        await package.from_location(describe_store(url), options)
    with pytest.raises(ConfigurationError) as opened:
        await open_durability(url, **options)
    assert str(direct.value) == str(opened.value)
    assert direct.value.context == opened.value.context == {"setting": "bogus"}
