"""Real stores (a SQLite file, a scratch PostgreSQL schema) with a finished thread, a waiting
thread and an uncertain write, all made through real turns."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from intention_kernel.contracts import DurabilityStore

from .support import Provider, commit_turn, uncertain_turn


@dataclass
class Seeded:
    backend: str
    store: str
    """The ``--store`` argument."""
    provider: Provider
    path: Path | None = None
    dsn: str | None = None
    schema: str | None = None

    async def open(self) -> DurabilityStore:
        if self.backend == "sqlite":
            from intention_kernel.durability.sqlite import SQLiteDurability

            assert self.path is not None
            return await SQLiteDurability.open(self.path)
        from intention_kernel.durability.postgres import PostgresDurability

        assert self.dsn is not None and self.schema is not None
        return await PostgresDurability.open(self.dsn, schema=self.schema, setup=True, max_size=2)

    def execute(self, sqlite: str, postgres: str, *args: Any) -> None:
        """Run a statement directly on the store (to age records in tests)."""
        if self.backend == "sqlite":
            from .support import sql

            assert self.path is not None
            plain = [a.isoformat() if isinstance(a, datetime) else a for a in args]
            sql(self.path, sqlite, plain)
            return
        import asyncpg

        async def run() -> None:
            conn = await asyncpg.connect(self.dsn)
            try:
                await conn.execute(postgres.format(s=f'"{self.schema}"'), *args)
            finally:
                await conn.close()

        asyncio.run(run())


async def _seed(seeded: Seeded) -> None:
    store = await seeded.open()
    provider = seeded.provider
    try:
        await commit_turn(store, "t-ok", "turn-1", text="charge me", charge=("o-1", provider))
        await commit_turn(store, "t-ok", "turn-2", text="thanks", events=2)
        await commit_turn(store, "t-wait", "turn-1", text="refund", interaction=True)
        await uncertain_turn(store, "t-unc", "turn-1", "o-9", provider)
    finally:
        await store.close()


def make_backend(backend: str, tmp_path: Path) -> Iterator[Seeded]:
    if backend == "sqlite":
        path = tmp_path / "store.db"
        yield Seeded("sqlite", str(path), Provider(), path=path)
        return
    from tests.support.postgres import drop_schema, require_postgres, scratch_schema

    dsn = require_postgres()
    schema = scratch_schema("ik_cli")
    try:
        yield Seeded("postgres", f"{dsn}?schema={schema}", Provider(), dsn=dsn, schema=schema)
    finally:
        asyncio.run(drop_schema(dsn, schema))


@pytest.fixture(params=["sqlite", "postgres"])
def empty(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Seeded]:
    """A store location with nothing in it yet (no file, no schema)."""
    yield from make_backend(request.param, tmp_path)


@pytest.fixture
def seeded(empty: Seeded) -> Seeded:
    asyncio.run(_seed(empty))
    return empty


@pytest.fixture
def sqlite_seeded(tmp_path: Path) -> Iterator[Seeded]:
    """The seeded store on SQLite only (tests of file-level behaviour)."""
    for seeded in make_backend("sqlite", tmp_path):
        asyncio.run(_seed(seeded))
        yield seeded
