"""PostgreSQL durability (extra ``intention-kernel[postgres]``): see ``docs/postgres.md``."""

from ._adapter import PostgresDurability
from ._lease import LeaseSettings
from ._operator import admin_connection, drop_schema, read_schema_info
from ._schema import DEFAULT_SCHEMA, MIGRATIONS, check_schema_name

__all__ = [
    "DEFAULT_SCHEMA",
    "MIGRATIONS",
    "LeaseSettings",
    "PostgresDurability",
    "admin_connection",
    "check_schema_name",
    "drop_schema",
    "read_schema_info",
]
