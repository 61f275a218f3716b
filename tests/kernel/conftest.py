"""Kernel test wiring: every end-to-end test runs once per durability adapter.

To run the kernel suite on another adapter, add one entry to ``DURABILITY_FACTORIES``: a name
and a function ``tmp_path -> async context manager yielding a DurabilityStore``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from intention_kernel.contracts import DurabilityStore
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing import MemoryDurability

from .support import World, make_world

DurabilityFactory = Callable[[Path], AbstractAsyncContextManager[DurabilityStore]]


@asynccontextmanager
async def _memory(tmp_path: Path) -> AsyncIterator[DurabilityStore]:
    durability = MemoryDurability()
    try:
        yield durability
    finally:
        await durability.close()


@asynccontextmanager
async def _sqlite(tmp_path: Path) -> AsyncIterator[DurabilityStore]:
    durability = await SQLiteDurability.open(tmp_path / "kernel.db")
    try:
        yield durability
    finally:
        await durability.close()


@asynccontextmanager
async def _postgres(tmp_path: Path) -> AsyncIterator[DurabilityStore]:
    from intention_kernel.durability.postgres import PostgresDurability
    from tests.support.postgres import drop_schema, require_postgres, scratch_schema

    dsn = await asyncio.to_thread(require_postgres)  # skips locally when no server answers
    schema = scratch_schema("ik_kernel")
    durability = await PostgresDurability.open(dsn, schema=schema, setup=True, max_size=4)
    try:
        yield durability
    finally:
        await durability.close()
        await drop_schema(dsn, schema)


DURABILITY_FACTORIES: list[tuple[str, DurabilityFactory]] = [
    ("memory", _memory),
    ("sqlite", _sqlite),
    ("postgres", _postgres),
]


@pytest.fixture(
    params=[f for _, f in DURABILITY_FACTORIES], ids=[n for n, _ in DURABILITY_FACTORIES]
)
async def durability(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[DurabilityStore]:
    factory: DurabilityFactory = request.param
    async with factory(tmp_path) as store:
        yield store


@pytest.fixture
def world(durability: DurabilityStore) -> World:
    return make_world(durability)
