"""``open_durability(url)``: pick a durability adapter by URL scheme.

Each branch imports its adapter only when its scheme is used, so ``import intention_kernel``
never loads a database driver; a missing extra gives an install hint.
"""

from __future__ import annotations

from typing import Any

from ..contracts.durability import DurabilityStore
from ..contracts.errors import ConfigurationError

__all__ = ["open_durability"]


async def open_durability(url: str, **options: Any) -> DurabilityStore:
    """Open the store named by ``url``: ``memory://`` or ``postgresql://...``."""
    scheme = url.split("://", 1)[0].lower() if isinstance(url, str) and "://" in url else ""
    if scheme == "memory":
        from .memory import MemoryDurability

        return MemoryDurability(**options)
    if scheme in ("postgresql", "postgres"):
        return await _open_postgres(url, **options)
    raise ConfigurationError(
        "unsupported durability URL scheme", context={"setting": "url", "scheme": scheme}
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
