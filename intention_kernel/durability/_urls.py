"""Store URLs taken apart, and passwords kept out of what is shown.

Why its own module: the adapters show URLs in their errors (``redact``) and the factory reads
them, so this sits below both and imports neither a driver nor an adapter. Each backend's URL
form is one ``locate_*`` function; ``factory`` picks it from its scheme table. Every mistake is
a ``ConfigurationError`` naming the setting.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import SplitResult, quote, unquote, urlsplit

from ..contracts.errors import ConfigurationError, KernelError

__all__ = [
    "MEMORY_PARAMETERS",
    "POSTGRESQL_PARAMETERS",
    "SQLITE_PARAMETERS",
    "Backend",
    "Parse",
    "StoreLocation",
    "check_options",
    "driver_refusals",
    "locate_memory",
    "locate_postgresql",
    "locate_sqlite",
    "parse_location",
    "redact",
    "split_query",
    "sqlite_url",
]

Backend = Literal["memory", "sqlite", "postgresql"]

# ``scheme://user:password@host``: the password is everything up to the netloc's last ``@``.
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):[^\s/?#]*@")
_PARAMETER_PASSWORD = re.compile(
    r"(?P<head>(?:^|[?&;\s])(?:password|passwd|sslpassword|secret|token)=)[^&;\s]*", re.I
)
# The same two inside a percent-encoded URL (a ``read_url=`` parameter): ``%3A`` is ``:``,
# ``%40`` is ``@``, ``%2F`` is ``/``, ``%3F`` is ``?``, ``%26`` is ``&`` and ``%3D`` is ``=``.
_ENCODED_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*%3A%2F%2F(?:(?!%3A|%40|%2F)[^/?&#\s])*)%3A"
    r"(?:(?!%40|%2F)[^/?&#\s])*%40",
    re.I,
)
_ENCODED_PARAMETER_PASSWORD = re.compile(
    r"(?P<head>(?:%3F|%26)(?:password|passwd|sslpassword|secret|token)%3D)(?:(?!%26)[^&;\s])*",
    re.I,
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
    text = _PARAMETER_PASSWORD.sub(r"\g<head>***", text)
    text = _ENCODED_URL_PASSWORD.sub(r"\g<head>%3A***%40", text)
    return _ENCODED_PARAMETER_PASSWORD.sub(r"\g<head>***", text)


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
    read_dsn: str | None = field(default=None, repr=False)
    """PostgreSQL: the ``read_url`` parameter, the URL of a hot standby (or any read-only
    copy) for replays and listings, as the driver gets it (may hold a password)."""


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


def _read_url(name: str, text: str) -> str:
    """A ``postgresql://`` URL with the driver's parameters only: the schema and the
    timeouts are the store URL's, one setting for both pools."""
    try:
        parts = urlsplit(text.strip())
    except ValueError:
        parts = urlsplit("")
    if parts.scheme.lower() not in ("postgresql", "postgres"):
        raise ConfigurationError(
            f"the URL parameter {name} must be a postgresql:// URL (percent-encoded)",
            context={"setting": name},
        )
    options, rest = split_query(parts.query, POSTGRESQL_PARAMETERS)
    if options:
        raise ConfigurationError(
            f"{name} takes the driver's parameters only; {', '.join(sorted(options))}"
            " comes from the store URL itself",
            context={"setting": name},
        )
    try:
        location = locate_postgresql(parts, {}, rest)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{name}: {exc.message}", context={"setting": name}) from None
    assert location.dsn is not None
    return location.dsn


Parse = Callable[[str, str], Any]
"""Reads one of our URL parameters (its name, its unquoted text) into an adapter option."""

MEMORY_PARAMETERS: Mapping[str, Parse] = {"lock_timeout": _seconds}
SQLITE_PARAMETERS: Mapping[str, Parse] = {"lock_timeout": _seconds, "busy_timeout": _seconds}
POSTGRESQL_PARAMETERS: Mapping[str, Parse] = {
    "schema": _text,
    "listen": _flag,
    "lock_timeout": _seconds,
    "statement_timeout": _seconds,
    "read_url": _read_url,
}


def split_query(query: str, ours: Mapping[str, Parse]) -> tuple[dict[str, Any], list[str]]:
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


def locate_memory(parts: SplitResult, options: dict[str, Any], rest: list[str]) -> StoreLocation:
    """``memory://``: nothing but our parameters."""
    if parts.netloc or parts.path or rest or parts.fragment:
        raise ConfigurationError(
            "memory:// takes no host, path or other parameter", context={"setting": "url"}
        )
    return StoreLocation("memory", options=options)


def locate_sqlite(parts: SplitResult, options: dict[str, Any], rest: list[str]) -> StoreLocation:
    """``sqlite:///relative.db`` or ``sqlite:////absolute.db``: the file, made absolute."""
    if rest:
        raise _unknown_parameter(rest, "sqlite", SQLITE_PARAMETERS)
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    bare = f"sqlite://{parts.netloc}{parts.path}{fragment}"  # urlunsplit drops an empty host
    return StoreLocation("sqlite", path=parse_location(bare), options=options)


def locate_postgresql(
    parts: SplitResult, options: dict[str, Any], rest: list[str]
) -> StoreLocation:
    """``postgresql://...``: the driver's URL without our parameters, its ports checked."""
    _check_hosts(parts.netloc)
    for piece in rest:
        key, _, value = piece.partition("=")
        if unquote(key) == "port":
            _check_ports(unquote(value), "port")
    query = f"?{'&'.join(rest)}" if rest else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    dsn = f"postgresql://{parts.netloc}{parts.path}{query}{fragment}"
    read = options.pop("read_url", None)  # kept out of ``options``, which ``repr`` shows
    return StoreLocation("postgresql", dsn=dsn, options=options, read_dsn=read)


def parse_location(location: str | os.PathLike[str]) -> Path:
    """A filesystem path from a path or a ``sqlite:///`` URL.

    URLs follow the usual Python convention: ``sqlite:///app.db`` is relative to the working
    directory and ``sqlite:////var/lib/app.db`` is absolute. Symlinks are resolved: every
    name of one file gives one path (and so one lock directory).
    """
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if not isinstance(location, str) or not location.strip():
        raise ConfigurationError(
            "the SQLite location must be a path or a sqlite:/// URL",
            context={"setting": "url"},
        )
    if "://" not in location:
        path = location
    else:
        parts = urlsplit(location)
        if parts.scheme != "sqlite" or parts.netloc or parts.query or parts.fragment:
            raise ConfigurationError(
                "expected sqlite:///relative/path or sqlite:////absolute/path",
                context={"setting": "url", "scheme": parts.scheme},
            )
        path = unquote(parts.path[1:])
    if not path or path == ":memory:" or path.startswith("file:"):
        raise ConfigurationError(
            "an in-memory SQLite database cannot be shared; give a file path",
            context={"setting": "url"},
        )
    # The real path: a database reached through a symlink or by another name must get the
    # same lock directory, or two holders would lock two files for one thread.
    return Path(os.path.realpath(Path(path).expanduser()))


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


def _unknown_parameter(
    rest: list[str], backend: Backend, ours: Mapping[str, Parse]
) -> ConfigurationError:
    name = unquote(rest[0].partition("=")[0])
    known = ", ".join(sorted(ours)) or "none"
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


def check_options(
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


@contextmanager
def driver_refusals(backend: Backend) -> Iterator[None]:
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
