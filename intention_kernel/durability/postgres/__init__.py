"""PostgreSQL durability (extra ``intention-kernel[postgres]``): see ``docs/postgres.md``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...contracts.errors import ConfigurationError
from ...contracts.inspect import SchemaInfo
from .._urls import StoreLocation, check_options, driver_refusals
from ._adapter import PostgresDurability
from ._connection import init_connection
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
    "from_location",
    "init_connection",
    "read_schema_info",
    "schema_info_at",
]


async def from_location(location: StoreLocation, settings: Mapping[str, Any]) -> PostgresDurability:
    """Open the store a ``postgresql://`` URL names; every setting is checked before a pool
    exists, so a bad one leaks nothing. ``settings`` are all its options, the URL's
    (``location.options``) with the caller's, as ``open_durability`` merges them; the URL's
    ``read_url`` becomes the ``read`` option."""
    if location.read_dsn is not None:
        if "read" in settings:
            raise ConfigurationError(
                "read is given both in the store URL (read_url) and as an argument",
                context={"setting": "read"},
            )
        settings = {**settings, "read": location.read_dsn}
    check_options(settings, location.backend, PostgresDurability.open)
    _check_pool_sizes(settings)
    if "schema" in settings:
        check_schema_name(settings["schema"])
    assert location.dsn is not None  # describe_store fills it for PostgreSQL
    with driver_refusals(location.backend):
        return await PostgresDurability.open(location.dsn, **settings)


async def schema_info_at(location: StoreLocation) -> SchemaInfo:
    """The version of the schema a ``postgresql://`` URL names, read without migrating."""
    schema = location.options.get("schema", DEFAULT_SCHEMA)
    assert location.dsn is not None  # describe_store fills it for PostgreSQL
    with driver_refusals(location.backend):
        return await read_schema_info(location.dsn, schema)


def _check_pool_sizes(settings: Mapping[str, Any]) -> None:
    """Whole numbers with ``1 <= max_size`` and ``0 <= min_size <= max_size``."""
    sizes = {"min_size": settings.get("min_size", 1), "max_size": settings.get("max_size", 10)}
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigurationError(
                f"{name} must be a whole number of connections", context={"setting": name}
            )
    if sizes["max_size"] < 1:
        raise ConfigurationError("max_size must be at least 1", context={"setting": "max_size"})
    if sizes["min_size"] > sizes["max_size"]:
        raise ConfigurationError(
            "min_size must not be greater than max_size",
            context={"setting": "min_size" if "min_size" in settings else "max_size"},
        )
