"""PostgreSQL durability (extra ``intention-kernel[postgres]``): see ``docs/postgres.md``."""

from ._adapter import PostgresDurability
from ._lease import LeaseSettings
from ._schema import DEFAULT_SCHEMA, MIGRATIONS

__all__ = ["DEFAULT_SCHEMA", "MIGRATIONS", "LeaseSettings", "PostgresDurability"]
