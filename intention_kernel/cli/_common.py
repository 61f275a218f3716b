"""What every command shares: options, exit codes, error mapping, JSON and table output.

Why map errors in one place: an operator's mistake (bad DSN, unknown thread, invalid JSON) must
end with one line naming the stable code and what to do, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import typer
from pydantic import BaseModel
from rich.console import Console

from ..contracts.durability import DurabilityStore
from ..contracts.errors import (
    CheckpointIncompatibleError,
    ConfigurationError,
    DurabilityError,
    EffectError,
    ErrorCode,
    InvalidInputError,
    KernelError,
    StoreSchemaError,
)
from ..contracts.inspect import StoreInspector

__all__ = [
    "CliError",
    "ExitCode",
    "JsonOpt",
    "StoreOpt",
    "age",
    "emit",
    "open_store",
    "run",
    "store_target",
    "store_url",
    "to_jsonable",
]

T = TypeVar("T")


class ExitCode(IntEnum):
    OK = 0
    FINDINGS = 1
    USAGE = 2
    STORE = 3


class CliError(Exception):
    """A user-facing failure with a stable code and an exit code."""

    def __init__(self, code: str, message: str, exit_code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.exit_code = exit_code


StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="IK_STORE",
        help="SQLite path or sqlite:/// URL, or a postgresql:// DSN (env IK_STORE).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def exit_code_for(exc: KernelError) -> ExitCode:
    if isinstance(exc, InvalidInputError | ConfigurationError | EffectError):
        return ExitCode.USAGE
    if isinstance(exc, CheckpointIncompatibleError):
        return ExitCode.FINDINGS
    if isinstance(exc, DurabilityError):
        return ExitCode.STORE
    return ExitCode.STORE


def to_jsonable(value: Any) -> Any:
    """Dataclasses, pydantic models and datetimes as plain JSON values."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def emit(as_json: bool, data: Any, human: Callable[[], None]) -> None:
    if as_json:
        print(json.dumps(to_jsonable(data), indent=2, sort_keys=True, ensure_ascii=False))
    else:
        human()


def age(moment: datetime | None) -> str:
    """``3d 4h`` style age of a timestamp (``-`` when unknown)."""
    if moment is None:
        return "-"
    seconds = max(0, int((datetime.now(UTC) - moment).total_seconds()))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def store_url(store: str | None) -> str:
    """A store URL from ``--store``/``IK_STORE``; plain paths become ``sqlite:///`` URLs."""
    if not store or not store.strip():
        raise CliError("STORE_REQUIRED", "give the store with --store or IK_STORE")
    text = store.strip()
    if "://" not in text:
        return "sqlite:///" + str(Path(text).expanduser().absolute())
    scheme = text.split("://", 1)[0].lower()
    if scheme in ("postgres", "postgresql"):
        return "postgresql://" + text.split("://", 1)[1]
    if scheme != "sqlite":
        raise CliError(
            "UNSUPPORTED_STORE",
            f"unsupported store scheme {scheme!r}: use a SQLite path, sqlite:///path or"
            " postgresql://user@host/db",
        )
    return text


def store_target(store: str | None) -> tuple[str, dict[str, Any]]:
    """The URL and adapter options: a PostgreSQL DSN's ``schema`` parameter picks the schema
    (the driver would send unknown parameters to the server as settings)."""
    url = store_url(store)
    if not url.startswith("postgresql://"):
        return url, {}
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    options: dict[str, Any] = {"min_size": 1, "max_size": 2}
    if schemas:
        options["schema"] = schemas[-1]
    return urlunsplit(parts._replace(query=rest)), options


def sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite:"):
        return None
    from ..durability.sqlite._location import parse_location

    return parse_location(url)


@asynccontextmanager
async def open_store(store: str | None, *, create: bool = False) -> Any:
    """Open the store (refusing a missing SQLite file unless ``create``) and close it after.

    ``create`` also applies pending migrations (a PostgreSQL schema is created and upgraded).
    """
    url, options = store_target(store)
    path = sqlite_path(url)
    if path is not None and not create and not path.exists():
        raise CliError(
            "STORE_NOT_FOUND",
            f"no SQLite store at {path} (create one with: intention-kernel migrate --store {path})",
        )
    if url.startswith("postgresql://"):
        options["setup"] = create
        if "schema" in options:  # checked before a pool exists, so a bad name leaks nothing
            from ..durability.postgres._schema import check_schema_name

            check_schema_name(options["schema"])
    from ..durability.factory import open_durability

    try:
        opened: DurabilityStore = await open_durability(url, **options)
    except StoreSchemaError as exc:
        if exc.code is ErrorCode.STORE_SCHEMA_MISSING:
            raise CliError(
                "STORE_SCHEMA_MISSING",
                "the store has no schema or an older one: run intention-kernel migrate",
                ExitCode.STORE,
            ) from None
        raise
    try:
        yield opened
    finally:
        await opened.close()


def inspector(store: DurabilityStore) -> StoreInspector:
    if not isinstance(store, StoreInspector):
        raise CliError(
            "NOT_INSPECTABLE",
            f"the {type(store).__name__} store does not offer operator queries",
            ExitCode.STORE,
        )
    return store


@contextmanager
def _mapped(as_json: bool) -> Iterator[None]:
    try:
        yield
    except CliError as exc:
        _fail(as_json, exc.code, exc.message, exc.exit_code, {})
    except KernelError as exc:
        _fail(as_json, str(exc.code), exc.message, exit_code_for(exc), exc.context)
    except OSError as exc:
        _fail(as_json, "STORE_UNAVAILABLE", f"{type(exc).__name__}: {exc}", ExitCode.STORE, {})


def _fail(
    as_json: bool, code: str, message: str, exit_code: ExitCode, context: dict[str, Any]
) -> None:
    if as_json:
        payload = {"error": {"code": code, "message": message, "context": context}}
        print(json.dumps(to_jsonable(payload), sort_keys=True))
    detail = ""
    safe = {k: v for k, v in context.items() if k in ("thread_id", "setting", "scheme", "found")}
    if safe:
        detail = " (" + ", ".join(f"{k}={v}" for k, v in safe.items()) + ")"
    err.print(f"error: [{code}] {message}{detail}", markup=False)
    raise typer.Exit(int(exit_code))


def run(as_json: bool, body: Callable[[], Awaitable[T]]) -> T:
    """Run an async command body with errors mapped to exit codes."""
    with _mapped(as_json):
        return asyncio.run(_call(body))
    raise AssertionError("unreachable")  # pragma: no cover


async def _call(body: Callable[[], Awaitable[T]]) -> T:
    return await body()
