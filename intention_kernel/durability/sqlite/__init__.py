"""The SQLite durability adapter: the embedded default store (stdlib ``sqlite3`` only)."""

from ._adapter import SQLiteDurability

__all__ = ["SQLiteDurability"]
