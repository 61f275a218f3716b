"""Opening an ``OutboxSource`` from a store URL, for the command line.

Stores register their scheme here (``register_source``), so the relay command works with any
store that implements ``OutboxSource`` without importing its driver up front. Built in:
``memory://`` (process-local and empty: only for trying the command out) and ``sqlite:///path``
(the SQLite adapter, imported only when such a URL is opened).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from urllib.parse import urlsplit

from ..contracts.errors import ConfigurationError
from ..contracts.outbox import OutboxSource

__all__ = ["SourceOpener", "open_source", "register_source"]

SourceOpener = Callable[[str], AbstractAsyncContextManager[OutboxSource]]

_OPENERS: dict[str, SourceOpener] = {}


def register_source(scheme: str, opener: SourceOpener) -> None:
    """Make ``open_source`` accept ``scheme://...`` URLs (e.g. ``sqlite``, ``postgresql``)."""
    _OPENERS[scheme.lower()] = opener


@asynccontextmanager
async def _open_memory(url: str) -> AsyncIterator[OutboxSource]:
    from ..durability.memory import MemoryDurability

    store = MemoryDurability()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def _open_sqlite(url: str) -> AsyncIterator[OutboxSource]:
    from ..durability.sqlite import SQLiteDurability

    store = await SQLiteDurability.open(url)
    try:
        yield store
    finally:
        await store.close()


register_source("memory", _open_memory)
register_source("sqlite", _open_sqlite)


def open_source(url: str) -> AbstractAsyncContextManager[OutboxSource]:
    """The source for a store URL; refuses unknown schemes with ``ConfigurationError``."""
    scheme = urlsplit(url).scheme.lower() if isinstance(url, str) else ""
    opener = _OPENERS.get(scheme)
    if opener is None:
        known = ", ".join(f"{name}://" for name in sorted(_OPENERS))
        raise ConfigurationError(
            f"no outbox source for this store URL (known: {known})",
            context={"scheme": scheme},
        )
    return opener(url)
