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

Every mistake in a URL or an option is a ``ConfigurationError`` naming the setting (never a
driver's ``ValueError`` or ``TypeError``), and no message carries a password: ``redact`` hides
them wherever a URL is shown.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import quote, unquote, urlsplit

from ..contracts.durability import DurabilityStore
from ..contracts.errors import ConfigurationError, KernelError
from ..contracts.inspect import SchemaInfo

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

# ``scheme://user:password@host``: the password is everything up to the netloc's last ``@``.
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):[^\s/?#]*@")
_PARAMETER_PASSWORD = re.compile(
    r"(?P<head>(?:^|[?&;\s])(?:password|passwd|sslpassword|secret|token)=)[^&;\s]*", re.I
)
# libpq's keyword/value form (``host=db user=app``): not a file name.
_KEYWORD_DSN = re.compile(r"\s*[a-z_]+=\S*(?:\s+[a-z_]+=\S*)*\s*")
_LIBPQ_KEYWORDS = frozenset(
    {"host", "hostaddr", "port", "dbname", "user", "password", "sslmode", "options", "service"}
)


def redact(text: str) -> str:
    """``text`` with every URL password (and ``password=`` parameter) shown as ``***``: for
    messages and log lines, which end up in tickets and terminals."""
    text = _URL_PASSWORD.sub(r"\g<head>:***@", text)
    return _PARAMETER_PASSWORD.sub(r"\g<head>***", text)


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
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:  # an unbalanced "[" around an IPv6 host, for one
        raise ConfigurationError(
            f"the store URL cannot be parsed: {exc}", context={"setting": "url"}
        ) from None
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
    _check_hosts(parts.netloc)
    for piece in rest:
        key, _, value = piece.partition("=")
        if unquote(key) == "port":
            _check_ports(unquote(value), "port")
    query = f"?{'&'.join(rest)}" if rest else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    dsn = f"postgresql://{parts.netloc}{parts.path}{query}{fragment}"
    return StoreLocation("postgresql", dsn=dsn, options=options)


def _check_ports(text: str, setting: str) -> None:
    """Each of the comma-separated ports is a number in 1-65535 (the driver would raise
    ``OverflowError`` or ``ValueError`` at the first connection)."""
    for port in text.split(","):
        if not (port.strip().isdigit() and 0 < int(port) < 65536):
            raise ConfigurationError(
                "a PostgreSQL port must be a number in 1-65535", context={"setting": setting}
            )


def _check_hosts(netloc: str) -> None:
    """``host[:port][,host[:port]...]`` after the credentials: every port in range."""
    for host in netloc.rpartition("@")[2].split(","):
        if not host.startswith("[") and host.count(":") > 1:
            raise ConfigurationError(
                "an IPv6 host in a URL goes in brackets: postgresql://user@[::1]:5432/db",
                context={"setting": "url"},
            )
        port = host.rpartition("]")[2] if host.startswith("[") else host
        if ":" in port:
            text = port.rpartition(":")[2]
            if text:
                _check_ports(text, "url")


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
    """The ``sqlite:///`` URL of a filesystem path (made absolute, special characters quoted).

    A PostgreSQL keyword/value string (``host=db user=app``) is refused: taken for a file name
    it would become an empty SQLite store."""
    text = os.fspath(path)
    if isinstance(text, str) and _KEYWORD_DSN.fullmatch(text):
        keys = {piece.partition("=")[0] for piece in text.split()}
        if keys & _LIBPQ_KEYWORDS:
            raise ConfigurationError(
                "this looks like a PostgreSQL keyword/value connection string; give a URL"
                " instead: postgresql://user@host:5432/dbname",
                context={"setting": "url"},
            )
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
    together with the URL's own parameters; one the adapter does not take is refused by name.
    A SQLite store is migrated on opening unless ``migrate=False`` (then a missing or older
    schema is refused); a PostgreSQL schema only with ``setup=True``.
    """
    location = describe_store(url)
    settings = _merged(location, options)
    if location.backend == "memory":
        from .memory import MemoryDurability

        _check_options(settings, location.backend, MemoryDurability.__init__)
        with _driver_refusals(location.backend):
            return MemoryDurability(**settings)
    if location.backend == "sqlite":
        from .sqlite import SQLiteDurability

        _check_options(settings, location.backend, SQLiteDurability.__init__, SQLiteDurability.open)
        with _driver_refusals(location.backend):
            return await SQLiteDurability.open(_required(location.path), **settings)
    postgres = _postgres()
    _check_options(settings, location.backend, postgres.PostgresDurability.open)
    _check_pool_sizes(settings)
    if "schema" in settings:  # checked before a pool exists, so a bad name leaks nothing
        postgres.check_schema_name(settings["schema"])
    with _driver_refusals(location.backend):
        store: DurabilityStore = await postgres.PostgresDurability.open(
            _required(location.dsn), **settings
        )
    return store


def _check_options(
    settings: Mapping[str, Any], backend: Backend, *functions: Callable[..., Any]
) -> None:
    """Refuse a keyword the adapter does not take, naming it (not a ``TypeError``)."""
    known = {
        name
        for function in functions
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)
        and name not in ("self", "location", "target")
    }
    for name in settings:
        if name not in known:
            raise ConfigurationError(
                f"unknown option {name!r} for a {backend} store"
                f" (known: {', '.join(sorted(known))})",
                context={"setting": name},
            )


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


@contextmanager
def _driver_refusals(backend: Backend) -> Iterator[None]:
    """A ``ValueError``, ``TypeError`` or ``OverflowError`` out of opening a store is a setting
    the driver refused (a connection parameter it cannot use): a ``ConfigurationError``."""
    try:
        yield
    except (ValueError, TypeError, OverflowError) as exc:
        if isinstance(exc, KernelError):
            raise
        raise ConfigurationError(
            f"the {backend} store refused its settings: {redact(str(exc))}",
            context={"setting": "url"},
        ) from exc


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
        from .sqlite._location import check_local

        path = _required(location.path)
        check_local(path)  # a store that could never be opened has no version to read
        return read_sqlite(path)
    postgres = _postgres()
    schema = location.options.get("schema", postgres.DEFAULT_SCHEMA)
    with _driver_refusals(location.backend):
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
