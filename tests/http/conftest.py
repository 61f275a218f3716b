"""Fixtures of the HTTP tests: a fresh store (a SQLite file, a scratch PostgreSQL schema), the
travel desk on it with a model and a provider that can be held, and the service on a real
uvicorn server on loopback (``live``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from intention_kernel.contracts import DurabilityStore
from intention_kernel.durability.sqlite import SQLiteDurability

from .support import Desk, Live, app_for, make_desk, serve


@asynccontextmanager
async def _sqlite(tmp_path: Path) -> AsyncIterator[DurabilityStore]:
    store = await SQLiteDurability.open(tmp_path / "http.db")
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def _postgres(tmp_path: Path) -> AsyncIterator[DurabilityStore]:
    from intention_kernel.durability.postgres import PostgresDurability
    from tests.support.postgres import drop_schema, require_postgres, scratch_schema

    dsn = await asyncio.to_thread(require_postgres)  # fails under CI=true when it is missing
    schema = scratch_schema("ik_http")
    store = await PostgresDurability.open(dsn, schema=schema, setup=True, max_size=6)
    try:
        yield store
    finally:
        await store.close()
        await drop_schema(dsn, schema)


StoreFactory = Callable[[Path], AbstractAsyncContextManager[DurabilityStore]]


@pytest.fixture(params=[_sqlite, _postgres], ids=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DurabilityStore]:
    factory: StoreFactory = request.param
    async with factory(tmp_path) as opened:
        yield opened


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[DurabilityStore]:
    async with _sqlite(tmp_path) as opened:
        yield opened


@pytest.fixture
def desk(store: DurabilityStore) -> Desk:
    return make_desk(store)


@pytest.fixture
def sqlite_desk(sqlite_store: DurabilityStore) -> Desk:
    return make_desk(sqlite_store)


@pytest.fixture
async def live(desk: Desk) -> AsyncIterator[Live]:
    async with serve(app_for(desk)) as running:
        yield running
