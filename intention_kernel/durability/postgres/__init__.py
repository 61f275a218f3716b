"""PostgreSQL durability (extra ``intention-kernel[postgres]``): see ``docs/postgres.md``."""

from ._adapter import PostgresDurability
from ._lease import LeaseSettings
from ._operator import read_schema_info
from ._schema import DEFAULT_SCHEMA, MIGRATIONS, check_schema_name

__all__ = [
    "DEFAULT_SCHEMA",
    "MIGRATIONS",
    "LeaseSettings",
    "PostgresDurability",
    "check_schema_name",
    "read_schema_info",
]
