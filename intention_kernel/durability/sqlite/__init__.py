"""The SQLite durability adapter: the embedded default store (stdlib ``sqlite3`` only)."""

from ._adapter import SQLiteDurability
from ._inspect import read_schema_info

__all__ = ["SQLiteDurability", "read_schema_info"]
