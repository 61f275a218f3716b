"""The one door from a store URL to a store.

``open_durability(url)`` opens it, ``describe_store(url)`` says what it names without opening it
and ``read_schema_info(url)`` reads its schema version without migrating. The command line and
the relay go through here too, so a URL means the same thing everywhere.

==========================  ================================================================
``memory://``               the in-process store (tests, trying commands out)
``sqlite:///app.db``        the embedded SQLite store, relative to the working directory
``sqlite:////var/app.db``   the same with an absolute path (``sqlite:///~/app.db`` expands)
``postgresql://...``        the PostgreSQL store (``postgres`` extra); ``postgres://`` too
==========================  ================================================================

Query parameters that are ours (``schema``, ``listen``, ``lock_timeout``, ``statement_timeout``
and ``read_url`` on PostgreSQL; ``lock_timeout``, ``busy_timeout`` on SQLite; ``lock_timeout`` on
memory) become adapter options and are removed from the URL: asyncpg would send an unknown
parameter to the server as a setting. Other PostgreSQL parameters (``sslmode``, ...) go to the
driver as given. ``read_url`` is the percent-encoded URL of a hot standby that replays and
listings read from (``docs/scale-out.md``); it takes the driver's parameters only.
``import intention_kernel`` never loads a database driver; a missing extra gives an install hint.

Every mistake in a URL or an option is a ``ConfigurationError`` naming the setting (never a
driver's ``ValueError`` or ``TypeError``), and no message carries a password: ``redact`` hides
them wherever a URL is shown.

Each scheme is one row of ``_SCHEMES``: its URL form (in ``_urls``) and its adapter
subpackage, imported only when a store is opened, which gives ``from_location`` and
``schema_info_at``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast
from urllib.parse import SplitResult, urlsplit

from ..contracts.durability import DurabilityStore
from ..contracts.errors import ConfigurationError
from ..contracts.inspect import SchemaInfo
from ._urls import (
    MEMORY_PARAMETERS,
    POSTGRESQL_PARAMETERS,
    SQLITE_PARAMETERS,
    Backend,
    Parse,
    StoreLocation,
    locate_memory,
    locate_postgresql,
    locate_sqlite,
    redact,
    split_query,
    sqlite_url,
)

__all__ = [
    "SUPPORTED_SCHEMES",
    "Backend",
    "StoreLocation",
    "describe_store",
    "open_durability",
    "read_schema_info",
    "redact",
    "sqlite_url",
]


class _Adapter(Protocol):
    """What an adapter subpackage gives the factory (its ``__init__``)."""

    async def from_location(
        self, location: StoreLocation, settings: Mapping[str, Any]
    ) -> DurabilityStore: ...

    async def schema_info_at(self, location: StoreLocation) -> SchemaInfo: ...


@dataclass(frozen=True, slots=True)
class _Scheme:
    """One store URL scheme: how its URL reads and which adapter opens it."""

    parameters: Mapping[str, Parse]
    """Our query parameters, which become adapter options."""
    locate: Callable[[SplitResult, dict[str, Any], list[str]], StoreLocation]
    """``(parts, our options, the other parameters)``: the URL taken apart."""
    package: str
    """The adapter subpackage, imported when a store is opened."""
    driver: str | None = None
    """The optional driver the package imports; missing, ``install`` says what to do."""
    install: str = ""


_POSTGRESQL = _Scheme(
    POSTGRESQL_PARAMETERS,
    locate_postgresql,
    ".postgres",
    "asyncpg",
    "PostgreSQL needs the postgres extra: pip install 'intention-kernel[postgres]'",
)
_SCHEMES: dict[str, _Scheme] = {
    "memory": _Scheme(MEMORY_PARAMETERS, locate_memory, ".memory"),
    "sqlite": _Scheme(SQLITE_PARAMETERS, locate_sqlite, ".sqlite"),
    "postgresql": _POSTGRESQL,
    "postgres": _POSTGRESQL,
}
"""URL scheme -> its row; a new store is one more row."""

SUPPORTED_SCHEMES = tuple(_SCHEMES)
_FORMS = (
    "memory://, sqlite:///relative.db, sqlite:////absolute/path.db or postgresql://user@host/db"
)


def describe_store(url: str) -> StoreLocation:
    """Take a store URL apart without opening anything; refuses with ``ConfigurationError``."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            f"a store URL looks like {_FORMS}",
            context={"setting": "url", "supported": list(SUPPORTED_SCHEMES)},
        )
    try:
        parts: SplitResult = urlsplit(url.strip())
    except ValueError as exc:  # an unbalanced "[" around an IPv6 host, for one
        raise ConfigurationError(
            f"the store URL cannot be parsed: {exc}", context={"setting": "url"}
        ) from None
    scheme = _SCHEMES.get(parts.scheme.lower())
    if scheme is None:
        known = ", ".join(f"{name}://" for name in SUPPORTED_SCHEMES)
        raise ConfigurationError(
            f"unsupported store URL scheme {parts.scheme!r}: use {known}",
            context={
                "setting": "url",
                "scheme": parts.scheme,
                "supported": list(SUPPORTED_SCHEMES),
            },
        )
    options, rest = split_query(parts.query, scheme.parameters)
    return scheme.locate(parts, options, rest)


def _merged(location: StoreLocation, options: Mapping[str, Any]) -> dict[str, Any]:
    """URL options plus the caller's keywords; the same setting from both is ambiguous."""
    for name in options:
        if name in location.options:
            raise ConfigurationError(
                f"{name} is given both in the store URL and as an argument",
                context={"setting": name},
            )
    return {**location.options, **options}


async def open_durability(url: str, **options: Any) -> DurabilityStore:
    """Open the store named by ``url``; close it with ``await store.close()``.

    ``options`` go to the adapter (``SQLiteDurability``, ``PostgresDurability.open``, ...)
    together with the URL's own parameters; one the adapter does not take is refused by name.
    A SQLite store is migrated on opening unless ``migrate=False`` (then a missing or older
    schema is refused); a PostgreSQL schema only with ``setup=True``.
    """
    location = describe_store(url)
    settings = _merged(location, options)
    return await _adapter(location.backend).from_location(location, settings)


async def read_schema_info(url: str) -> SchemaInfo:
    """The schema version of the store at ``url``, read without creating or migrating
    anything (for ``migrate --dry-run`` and operator checks). A missing store reads as
    version 0."""
    location = describe_store(url)
    return await _adapter(location.backend).schema_info_at(location)


def _adapter(backend: Backend) -> _Adapter:
    """The backend's adapter subpackage, or its install hint when its driver is missing."""
    scheme = _SCHEMES[backend]  # a backend's name is its own scheme
    try:
        module = importlib.import_module(scheme.package, __package__)
    except ModuleNotFoundError as exc:
        if scheme.driver is None or (exc.name or "").split(".")[0] != scheme.driver:
            raise
        raise ConfigurationError(scheme.install, context={"setting": "url"}) from exc
    return cast(_Adapter, module)
