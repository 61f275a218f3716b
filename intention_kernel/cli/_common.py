"""What every command shares: options, exit codes, error mapping, JSON and table output.

Why map errors in one place: an operator's mistake (bad DSN, unknown thread, invalid JSON) must
end with one line naming the stable code and what to do, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Annotated, Any, TypeVar

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
from ..durability.factory import StoreLocation, describe_store, open_durability, sqlite_url

__all__ = [
    "CliError",
    "ExitCode",
    "JsonOpt",
    "OlderThanOpt",
    "StoreOpt",
    "age",
    "emit",
    "open_store",
    "parse_duration",
    "run",
    "store_location",
    "store_url",
    "to_jsonable",
]

T = TypeVar("T")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


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
        help="SQLite path or sqlite:/// URL, or a postgresql:// DSN (env IK_STORE);"
        " see docs/durability.md for every form.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
OlderThanOpt = Annotated[
    str, typer.Option("--older-than", help="An age: 90s, 30m, 12h, 30d or 2w.", show_default=False)
]

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


def print_fields(rows: list[tuple[str, object]]) -> None:
    """Label/value lines with the values aligned (``status``, ``outbox stats``)."""
    width = max(len(label) for label, _ in rows) + 1
    for label, value in rows:
        out.print(f"{label:<{width}}{value}", markup=False)


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
    """A store URL from ``--store``/``IK_STORE``; a plain path names a SQLite file."""
    if not store or not store.strip():
        raise CliError("STORE_REQUIRED", "give the store with --store or IK_STORE")
    text = store.strip()
    return text if "://" in text else sqlite_url(text)


def store_location(store: str | None) -> tuple[str, StoreLocation]:
    """The URL and what it names (taken apart by the durability factory, nowhere else)."""
    url = store_url(store)
    try:
        return url, describe_store(url)
    except ConfigurationError as exc:
        if "supported" in exc.context:  # an unknown scheme, not a bad value
            raise CliError("UNSUPPORTED_STORE", exc.message) from None
        raise


@asynccontextmanager
async def open_store(
    store: str | None, *, create: bool = False, pool_size: int = 2
) -> AsyncIterator[DurabilityStore]:
    """Open the store (refusing a missing SQLite file unless ``create``) and close it after.

    ``create`` also applies pending migrations (a PostgreSQL schema is created and upgraded).
    A command needs few connections, so a PostgreSQL pool stays at ``pool_size``.
    """
    url, location = store_location(store)
    path = location.path
    if path is not None and not create and not path.exists():
        raise CliError(
            "STORE_NOT_FOUND",
            f"no SQLite store at {path} (create one with: intention-kernel migrate --store {path})",
        )
    options: dict[str, Any] = {}
    if location.backend == "postgresql":
        options = {"setup": create, "min_size": 1, "max_size": pool_size}
    try:
        opened = await open_durability(url, **options)
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


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30m``, ``12h``, ``30d``, ``2w`` (``1.5h`` too). A unit is required: a bare
    number would silently mean seconds, and a retention of seconds deletes nearly everything."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if match is None:
        raise CliError(
            "INVALID_DURATION", f"{text!r} is not a duration like 90s, 30m, 12h, 30d or 2w"
        )
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


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
