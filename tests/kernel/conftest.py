"""Kernel test wiring: every end-to-end test runs once per durability adapter.

To run the kernel suite on another adapter, add one entry to ``DURABILITY_FACTORIES``: a name
and a function ``tmp_path -> async context manager yielding a DurabilityStore``.
"""

from __future__ import annotations

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


DURABILITY_FACTORIES: list[tuple[str, DurabilityFactory]] = [
    ("memory", _memory),
    ("sqlite", _sqlite),
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
