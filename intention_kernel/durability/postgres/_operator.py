"""Operator reads that must not change the store: one connection, read, closed.

``migrate --dry-run`` has to tell a missing or old schema from a current one without opening
the adapter (which verifies the schema and refuses a missing one) and without a pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from ...contracts.inspect import SchemaInfo
from ._errors import translated
from ._inspect import schema_info_of
from ._schema import DEFAULT_SCHEMA, check_schema_name

__all__ = ["admin_connection", "drop_schema", "read_schema_info"]


async def read_schema_info(dsn: str, schema: str = DEFAULT_SCHEMA) -> SchemaInfo:
    """The version of ``schema`` at ``dsn`` (0 when it does not exist), read without migrating.

    ``dsn`` is a plain ``postgresql://`` URL as the driver takes it (``describe_store`` removes
    our own parameters such as ``schema``).
    """
    name = check_schema_name(schema)
    async with admin_connection(dsn) as conn:
        return await schema_info_of(conn, name)


@asynccontextmanager
async def admin_connection(dsn: str, *, connect_timeout: float = 10.0) -> AsyncIterator[Any]:
    """One plain connection for administration (checks, scratch schemas in tests), closed
    after the block; connection errors are the library's ``DurabilityError``s."""
    with translated():
        conn = await asyncpg.connect(dsn, timeout=connect_timeout)
    try:
        yield conn
    finally:
        await conn.close()


async def drop_schema(dsn: str, schema: str) -> None:
    """Remove a schema and everything in it (irreversible: for scratch schemas)."""
    name = check_schema_name(schema)
    async with admin_connection(dsn) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
