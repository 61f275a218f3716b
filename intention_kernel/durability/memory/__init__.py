"""The in-process store (**test-only**): the whole contract in one process, lost with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...contracts.inspect import SchemaInfo
from .._urls import StoreLocation, check_options, driver_refusals
from ._adapter import MemoryDurability, MemoryStore

__all__ = ["MemoryDurability", "MemoryStore", "from_location", "schema_info_at"]


async def from_location(location: StoreLocation, settings: Mapping[str, Any]) -> MemoryDurability:
    """The store ``memory://`` names: a new, empty one. ``settings`` are all its options, the
    URL's (``location.options``) with the caller's, as ``open_durability`` merges them."""
    check_options(settings, location.backend, MemoryDurability.__init__)
    with driver_refusals(location.backend):
        return MemoryDurability(**settings)


async def schema_info_at(location: StoreLocation) -> SchemaInfo:
    """The schema a new memory store has (there is nothing to read back)."""
    store = MemoryDurability()
    try:
        return await store.schema_info()
    finally:
        await store.close()
