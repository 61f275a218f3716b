"""``open_durability(url)``: pick a store by URL, importing only that backend's module.

``memory://`` gives the test-only in-process store; ``sqlite:///relative.db`` and
``sqlite:////absolute/path.db`` the embedded SQLite store. Options go to the adapter.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ..contracts.durability import DurabilityStore
from ..contracts.errors import ConfigurationError

__all__ = ["open_durability"]


async def open_durability(url: str, **options: Any) -> DurabilityStore:
    """Open the store named by ``url``; close it with ``await store.close()``."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            "a durability URL looks like memory:// or sqlite:////path/to/file.db",
            context={"setting": "url"},
        )
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        from .memory import MemoryDurability

        return MemoryDurability(**options)
    if scheme == "sqlite":
        from .sqlite import SQLiteDurability

        return await SQLiteDurability.open(url, **options)
    # Further backends (postgresql://) get their own branch here, importing lazily.
    raise ConfigurationError(
        "unsupported durability URL scheme",
        context={"setting": "url", "scheme": scheme, "supported": ["memory", "sqlite"]},
    )
