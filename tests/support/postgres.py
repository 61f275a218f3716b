"""Test helpers for the PostgreSQL adapter: the server to use, scratch schemas, a harness.

``IK_POSTGRES_DSN`` names the server (default ``postgresql://postgres@127.0.0.1:5432/test``).
Without ``CI=true`` an unreachable server skips the calling test with the reason; with
``CI=true`` it fails, so a broken CI service is never silently green.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from intention_kernel.contracts.durability import DurabilityStore
from intention_kernel.contracts.ids import new_id
from intention_kernel.durability.postgres import (
    MIGRATIONS,
    PostgresDurability,
    admin_connection,
    drop_schema,
)
from intention_kernel.testing.conformance import ConformanceHarness

__all__ = [
    "PostgresHarness",
    "drop_schema",
    "postgres_dsn",
    "require_postgres",
    "revoke_lease",
    "schema_at_version",
    "scratch_schema",
]

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def postgres_dsn() -> str:
    return os.environ.get("IK_POSTGRES_DSN", DEFAULT_DSN)


def require_postgres(dsn: str | None = None) -> str:
    """The DSN, after checking the server answers (skip locally, fail under CI)."""
    dsn = dsn or postgres_dsn()

    async def ping() -> None:
        async with admin_connection(dsn, connect_timeout=5):
            pass

    try:
        asyncio.run(ping())
    except Exception as exc:
        reason = f"PostgreSQL at {dsn} is not reachable: {type(exc).__name__}: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return dsn


def scratch_schema(prefix: str = "ik_test") -> str:
    return f"{prefix}_{new_id('s').split('_', 1)[1]}"


async def schema_at_version(conn: Any, schema: str, version: int) -> str:
    """Create ``schema`` as a store of that schema version left it (its first ``version``
    migrations, recorded), for a test of the migrations after it; returns the quoted name."""
    s = f'"{schema}"'
    await conn.execute(f"CREATE SCHEMA {s}")
    await conn.execute(
        f"CREATE TABLE {s}.schema_migrations (version integer PRIMARY KEY,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for number, migration in enumerate(MIGRATIONS[:version], start=1):
        await conn.execute(migration.format(s=s))
        await conn.execute(f"INSERT INTO {s}.schema_migrations VALUES ($1)", number)
    return s


async def revoke_lease(store: PostgresDurability, thread_id: str) -> None:
    """Act as a new holder taking the thread over: bump the lease epoch, so the current
    holder's token no longer matches."""
    await store.pool.execute(
        f'UPDATE "{store.schema}".leases SET epoch = epoch + 1 WHERE thread_id = $1', thread_id
    )


class PostgresHarness(ConformanceHarness):
    """Conformance harness: one scratch schema per test, dropped afterwards."""

    stateful_examples = 25

    def __init__(self, dsn: str, **options: Any) -> None:
        super().__init__()
        self.dsn = dsn
        self.schema = scratch_schema()
        self.options = options
        self._created = False
        self._by_loop: dict[asyncio.AbstractEventLoop, list[PostgresDurability]] = {}

    async def _open(self, *, lock_timeout: float) -> DurabilityStore:
        loop = asyncio.get_running_loop()
        if loop not in self._by_loop:
            self._close_with(loop)
        store = await PostgresDurability.open(
            self.dsn,
            schema=self.schema,
            setup=not self._created,
            lock_timeout=lock_timeout,
            min_size=0,
            max_size=2,
            **self.options,
        )
        self._created = True
        self._by_loop[loop].append(store)
        return store

    def _close_with(self, loop: asyncio.AbstractEventLoop) -> None:
        """Close this loop's stores before the loop closes: the stateful test runs each
        program on its own loop and closes it without closing the stores it opened."""
        self._by_loop[loop] = []
        original = loop.close

        def close() -> None:
            stores = self._by_loop.pop(loop, [])
            if stores and not loop.is_running() and not loop.is_closed():

                async def close_stores() -> None:
                    for store in stores:
                        await store.close()

                loop.run_until_complete(close_stores())
            original()

        loop.close = close  # type: ignore[method-assign]

    async def revoke_lease(self, thread_id: str) -> None:
        async with admin_connection(self.dsn) as conn:
            await conn.execute(
                f'UPDATE "{self.schema}".leases SET epoch = epoch + 1 WHERE thread_id = $1',
                thread_id,
            )

    async def _cleanup(self) -> None:
        if self._created:
            await drop_schema(self.dsn, self.schema)
