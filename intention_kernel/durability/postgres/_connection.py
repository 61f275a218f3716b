"""``PgConnection``: the pool and lanes every role of a PostgreSQL store shares.

Each statement is bounded by ``statement_timeout`` (``bounded``): a session holding a row lock
or an exhausted pool ends the statement with a retryable STORE_BUSY, never a hang.
"""

from __future__ import annotations

from typing import Any

from ._errors import bounded
from ._lanes import Lanes

__all__ = ["PgConnection", "init_connection", "read_only"]

ARRAY_TYPES = "SELECT $1::bool[], $2::int4[], $3::int8[], $4::float8[]"
"""The array types the store's statements take and return that asyncpg does not know
built in (``text[]`` it does)."""


async def init_connection(conn: Any) -> None:
    """Pool ``init`` hook: teach a new connection the store's array types, in one transaction
    with JIT off. Why: asyncpg looks a type up on its first use; its lookup turns JIT off for
    itself with a session setting, but behind a transaction-mode pooler that setting lands on
    another server connection and the lookup, JIT-compiled, takes about 0.9 s (PostgreSQL
    15) - in the middle of a turn that holds its lease. Pass it as ``init=`` to a pool you
    lend the store; the pools the store opens use it."""
    async with conn.transaction():
        if conn.get_server_version().major >= 11:  # JIT exists from PostgreSQL 11
            await conn.execute("SET LOCAL jit = off")
        await conn.fetchrow(ARRAY_TYPES, None, None, None, None)


def read_only(conn: Any) -> bool:
    """The session is read-only (``default_transaction_read_only``, a hot standby: both
    reported by the server on every connection since PostgreSQL 14)."""
    settings = conn.get_settings()
    return (
        getattr(settings, "default_transaction_read_only", "off") == "on"
        or getattr(settings, "in_hot_standby", "off") == "on"
    )


class PgConnection:
    """One store's asyncpg pool (owned or lent), its lanes and its statement budget."""

    def __init__(
        self, pool: Any, *, schema: str, statement_timeout: float, owns_pool: bool
    ) -> None:
        self.pool = pool
        self.lanes = Lanes(pool)
        self.schema = schema
        self.statement_timeout = statement_timeout
        self.owns_pool = owns_pool

    async def statement(
        self, method: str, sql: str, args: tuple[Any, ...], deadline: float | None = None
    ) -> Any:
        """``connection.<method>(sql, *args)`` on a lane, within the statement budget."""
        run = self.lanes.run
        return await bounded(
            lambda t: run(lambda c, t: getattr(c, method)(sql, *args, timeout=t), t),
            deadline or self.statement_timeout,
        )

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        return await self.statement("fetchrow", sql, args)

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        rows: list[Any] = await self.statement("fetch", sql, args)
        return rows

    async def execute_status(self, sql: str, *args: Any, deadline: float | None = None) -> int:
        """Run one statement; the row count of its status tag (``UPDATE 3`` -> 3)."""
        status: str = await self.statement("execute", sql, args, deadline)
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def execute(self, sql: str, *args: Any, deadline: float | None = None) -> None:
        await self.statement("execute", sql, args, deadline)

    async def close(self) -> None:
        await self.lanes.close()
        if self.owns_pool:
            await self.pool.close()
