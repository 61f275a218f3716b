"""The SQLite durability adapter: the embedded default store (stdlib ``sqlite3`` only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...contracts.inspect import SchemaInfo
from .._urls import StoreLocation, check_options, driver_refusals
from ._adapter import SQLiteDurability
from ._inspect import read_schema_info
from ._location import check_local

__all__ = [
    "SQLiteDurability",
    "from_location",
    "read_schema_info",
    "schema_info_at",
]


async def from_location(location: StoreLocation, settings: Mapping[str, Any]) -> SQLiteDurability:
    """Open the file a ``sqlite:///`` URL names, migrating it unless ``migrate=False``.
    ``settings`` are all its options, the URL's (``location.options``) with the caller's, as
    ``open_durability`` merges them."""
    check_options(settings, location.backend, SQLiteDurability.__init__, SQLiteDurability.open)
    assert location.path is not None  # describe_store fills it for SQLite
    with driver_refusals(location.backend):
        return await SQLiteDurability.open(location.path, **settings)


async def schema_info_at(location: StoreLocation) -> SchemaInfo:
    """The schema of the file a ``sqlite:///`` URL names, read without migrating."""
    assert location.path is not None  # describe_store fills it for SQLite
    check_local(location.path)  # a store that could never be opened has no version to read
    return read_schema_info(location.path)
