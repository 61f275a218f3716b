"""Opening an ``OutboxSource`` from a store URL, for the command line.

Stores register their scheme here (``register_source``), so the relay command works with any
store that implements ``OutboxSource`` without importing its driver up front. Built in:
``memory://`` (process-local and empty: only for trying the command out), ``sqlite:///path``
(the SQLite adapter) and ``postgresql://...`` (the PostgreSQL adapter; ``?schema=name`` picks a
schema other than the default, ``?listen=1`` wakes the relay by ``LISTEN``). A store's driver
is imported only when such a URL is opened.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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


@asynccontextmanager
async def _open_postgres(url: str) -> AsyncIterator[OutboxSource]:
    """``schema`` and ``listen`` travel as query parameters, removed before the URL reaches
    asyncpg (which would send them to the server as settings)."""
    from ..durability.postgres import DEFAULT_SCHEMA, PostgresDurability

    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = dict(item for item in query if item[0] in ("schema", "listen"))
    schema = ours.get("schema", DEFAULT_SCHEMA)
    listen = ours.get("listen", "0").lower() in ("1", "true", "yes", "on")
    rest = urlencode([(key, value) for key, value in query if key not in ours])
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, rest, parts.fragment))
    store = await PostgresDurability.open(dsn, schema=schema, min_size=1, max_size=4, listen=listen)
    try:
        yield store
    finally:
        await store.close()


register_source("memory", _open_memory)
register_source("sqlite", _open_sqlite)
register_source("postgresql", _open_postgres)
register_source("postgres", _open_postgres)


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
