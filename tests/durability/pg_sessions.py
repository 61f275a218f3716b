"""A PostgreSQL store on read-only sessions, as a standby or a read-only pooler gives them."""

from __future__ import annotations

from typing import Any

import asyncpg

from intention_kernel.durability.postgres import PostgresDurability


async def keep_session(conn: Any) -> None:
    """No reset query between uses (as the store's own pools): one statement is one."""


async def read_only_store(dsn: str, schema: str) -> tuple[PostgresDurability, Any]:
    """A store on a pool whose sessions are read-only (``default_transaction_read_only``),
    and the pool (the caller closes both)."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=1,
        max_size=2,
        server_settings={"default_transaction_read_only": "on"},
        reset=keep_session,
    )
    return await PostgresDurability.open(pool, schema=schema), pool
