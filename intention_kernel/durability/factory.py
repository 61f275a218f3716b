"""``open_durability(url)``: pick a store by URL, importing only that backend's module.

``memory://`` gives the test-only in-process store; ``sqlite:///relative.db`` and
``sqlite:////absolute/path.db`` the embedded SQLite store; ``postgresql://...`` the PostgreSQL
store (``postgres`` extra). Options go to the adapter. ``import intention_kernel`` never loads a
database driver; a missing extra gives an install hint.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ..contracts.durability import DurabilityStore
from ..contracts.errors import ConfigurationError

__all__ = ["open_durability"]

SUPPORTED = ["memory", "sqlite", "postgresql"]


async def open_durability(url: str, **options: Any) -> DurabilityStore:
    """Open the store named by ``url``; close it with ``await store.close()``."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            "a durability URL looks like memory://, sqlite:////path/to/file.db or postgresql://...",
            context={"setting": "url"},
        )
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        from .memory import MemoryDurability

        return MemoryDurability(**options)
    if scheme == "sqlite":
        from .sqlite import SQLiteDurability

        return await SQLiteDurability.open(url, **options)
    if scheme in ("postgresql", "postgres"):
        return await _open_postgres(url, **options)
    raise ConfigurationError(
        "unsupported durability URL scheme",
        context={"setting": "url", "scheme": scheme, "supported": SUPPORTED},
    )


async def _open_postgres(url: str, **options: Any) -> DurabilityStore:
    try:
        from .postgres import PostgresDurability
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ConfigurationError(
            "PostgreSQL needs the postgres extra: pip install 'intention-kernel[postgres]'",
            context={"setting": "url"},
        ) from exc
    return await PostgresDurability.open(url, **options)
