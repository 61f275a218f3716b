"""Operator reads that must not change the store: one connection, read, closed.

``migrate --dry-run`` has to tell a missing or old schema from a current one without opening
the adapter (which verifies the schema and refuses a missing one) and without a pool.
"""

from __future__ import annotations

import asyncpg

from ...contracts.inspect import SchemaInfo
from ._errors import translated
from ._inspect import schema_info_of
from ._schema import DEFAULT_SCHEMA, check_schema_name

__all__ = ["read_schema_info"]


async def read_schema_info(dsn: str, schema: str = DEFAULT_SCHEMA) -> SchemaInfo:
    """The version of ``schema`` at ``dsn`` (0 when it does not exist), read without migrating.

    ``dsn`` is a plain ``postgresql://`` URL as the driver takes it (``describe_store`` removes
    our own parameters such as ``schema``).
    """
    name = check_schema_name(schema)
    with translated():
        conn = await asyncpg.connect(dsn)
    try:
        return await schema_info_of(conn, name)
    finally:
        await conn.close()
