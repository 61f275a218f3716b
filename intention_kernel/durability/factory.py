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
on PostgreSQL; ``lock_timeout``, ``busy_timeout`` on SQLite; ``lock_timeout`` on memory) become
adapter options and are removed from the URL: asyncpg would send an unknown parameter to the
server as a setting. Other PostgreSQL parameters (``sslmode``, ...) go to the driver as given.
``import intention_kernel`` never loads a database driver; a missing extra gives an install hint.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import quote, unquote, urlsplit

from ..contracts.durability import DurabilityStore
from ..contracts.errors import ConfigurationError
from ..contracts.inspect import SchemaInfo

__all__ = [
    "SUPPORTED_SCHEMES",
    "Backend",
    "StoreLocation",
    "describe_store",
    "open_durability",
    "read_schema_info",
    "sqlite_url",
]

T = TypeVar("T")
Backend = Literal["memory", "sqlite", "postgresql"]

SUPPORTED_SCHEMES = ("memory", "sqlite", "postgresql", "postgres")
_BACKENDS: dict[str, Backend] = {
    "memory": "memory",
    "sqlite": "sqlite",
    "postgresql": "postgresql",
    "postgres": "postgresql",
}
_FORMS = (
    "memory://, sqlite:///relative.db, sqlite:////absolute/path.db or postgresql://user@host/db"
)
_INSTALL_HINT = "PostgreSQL needs the postgres extra: pip install 'intention-kernel[postgres]'"


def _seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ConfigurationError(
            f"the URL parameter {name} must be a positive number of seconds",
            context={"setting": name},
        )
    return value


def _flag(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(
        f"the URL parameter {name} must be 1/0, true/false, yes/no or on/off",
        context={"setting": name},
    )


def _text(name: str, text: str) -> str:
    return text


_Parse = Callable[[str, str], Any]
_PARAMETERS: dict[Backend, dict[str, _Parse]] = {
    "memory": {"lock_timeout": _seconds},
    "sqlite": {"lock_timeout": _seconds, "busy_timeout": _seconds},
    "postgresql": {
        "schema": _text,
        "listen": _flag,
        "lock_timeout": _seconds,
        "statement_timeout": _seconds,
    },
}


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """What a store URL names, taken apart once: the backend, where the data lives, and the
    adapter options the URL carries."""

    backend: Backend
    path: Path | None = None
    """SQLite: the database file (absolute)."""
    dsn: str | None = field(default=None, repr=False)
    """PostgreSQL: the URL without our parameters, as the driver gets it (may hold a password,
    so it is kept out of ``repr``)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Adapter options from the URL's query (``schema``, ``listen``, ...)."""


def describe_store(url: str) -> StoreLocation:
    """Take a store URL apart without opening anything; refuses with ``ConfigurationError``."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            f"a store URL looks like {_FORMS}",
            context={"setting": "url", "supported": list(SUPPORTED_SCHEMES)},
        )
    parts = urlsplit(url.strip())
    backend = _BACKENDS.get(parts.scheme.lower())
    if backend is None:
        known = ", ".join(f"{scheme}://" for scheme in SUPPORTED_SCHEMES)
        raise ConfigurationError(
            f"unsupported store URL scheme {parts.scheme!r}: use {known}",
            context={
                "setting": "url",
                "scheme": parts.scheme,
                "supported": list(SUPPORTED_SCHEMES),
            },
        )
    options, rest = _split_query(parts.query, _PARAMETERS[backend])
    if backend == "memory":
        if parts.netloc or parts.path or rest or parts.fragment:
            raise ConfigurationError(
                "memory:// takes no host, path or other parameter", context={"setting": "url"}
            )
        return StoreLocation("memory", options=options)
    if backend == "sqlite":
        if rest:
            raise _unknown_parameter(rest, backend)
        from .sqlite._location import parse_location

        fragment = f"#{parts.fragment}" if parts.fragment else ""
        bare = f"sqlite://{parts.netloc}{parts.path}{fragment}"  # urlunsplit drops an empty host
        return StoreLocation("sqlite", path=parse_location(bare), options=options)
    try:
        _ = parts.port  # a port that is not a number in range raises ValueError
    except ValueError:
        raise ConfigurationError(
            "the PostgreSQL URL has an invalid port", context={"setting": "url"}
        ) from None
    query = f"?{'&'.join(rest)}" if rest else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    dsn = f"postgresql://{parts.netloc}{parts.path}{query}{fragment}"
    return StoreLocation("postgresql", dsn=dsn, options=options)


def _split_query(query: str, ours: Mapping[str, _Parse]) -> tuple[dict[str, Any], list[str]]:
    """Our parameters parsed, and the others' raw ``key=value`` pieces kept byte for byte."""
    options: dict[str, Any] = {}
    rest: list[str] = []
    for piece in query.split("&") if query else []:
        key, _, value = piece.partition("=")
        name = unquote(key.replace("+", " "))
        if name not in ours:
            rest.append(piece)
            continue
        if name in options:
            raise ConfigurationError(
                f"the URL gives {name} more than once", context={"setting": name}
            )
        options[name] = ours[name](name, unquote(value.replace("+", " ")))
    return options, rest


def _unknown_parameter(rest: list[str], backend: Backend) -> ConfigurationError:
    name = unquote(rest[0].partition("=")[0])
    known = ", ".join(sorted(_PARAMETERS[backend])) or "none"
    return ConfigurationError(
        f"unknown {backend} URL parameter {name!r} (known: {known})",
        context={"setting": name},
    )


def sqlite_url(path: str | os.PathLike[str]) -> str:
    """The ``sqlite:///`` URL of a filesystem path (made absolute, special characters quoted)."""
    absolute = Path(path).expanduser().absolute()
    return "sqlite:///" + quote(str(absolute))


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
    together with the URL's own parameters.
    """
    location = describe_store(url)
    settings = _merged(location, options)
    if location.backend == "memory":
        from .memory import MemoryDurability

        return MemoryDurability(**settings)
    if location.backend == "sqlite":
        from .sqlite import SQLiteDurability

        return await SQLiteDurability.open(_required(location.path), **settings)
    postgres = _postgres()
    if "schema" in settings:  # checked before a pool exists, so a bad name leaks nothing
        postgres.check_schema_name(settings["schema"])
    store: DurabilityStore = await postgres.PostgresDurability.open(
        _required(location.dsn), **settings
    )
    return store


async def read_schema_info(url: str) -> SchemaInfo:
    """The schema version of the store at ``url``, read without creating or migrating
    anything (for ``migrate --dry-run`` and operator checks). A missing store reads as
    version 0."""
    location = describe_store(url)
    if location.backend == "memory":
        from .memory import MemoryDurability

        store = MemoryDurability()
        try:
            return await store.schema_info()
        finally:
            await store.close()
    if location.backend == "sqlite":
        from .sqlite import read_schema_info as read_sqlite

        return read_sqlite(_required(location.path))
    postgres = _postgres()
    schema = location.options.get("schema", postgres.DEFAULT_SCHEMA)
    info: SchemaInfo = await postgres.read_schema_info(_required(location.dsn), schema)
    return info


def _postgres() -> Any:
    """The PostgreSQL package, or the install hint when its driver is missing."""
    try:
        from . import postgres
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "asyncpg":
            raise
        raise ConfigurationError(_INSTALL_HINT, context={"setting": "url"}) from exc
    return postgres


def _required(value: T | None) -> T:
    assert value is not None  # describe_store fills it for this backend
    return value
