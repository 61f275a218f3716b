"""What every command shares: options, exit codes, error mapping, JSON and table output.

Why map errors in one place: an operator's mistake (bad DSN, unknown thread, invalid JSON) must
end with one line naming the stable code and what to do, never a traceback; and no message,
however it was built, may show a password (every one goes through ``redact``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shlex
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, is_dataclass
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from ..contracts.checkpoint import KernelCheckpoint
from ..contracts.durability import DurabilityStore
from ..contracts.errors import (
    AgentCompilationError,
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
from ..durability.factory import (
    StoreLocation,
    describe_store,
    open_durability,
    redact,
    sqlite_url,
)
from ..operations import age

__all__ = [
    "CliError",
    "ExitCode",
    "JsonOpt",
    "OlderThanOpt",
    "StoreOpt",
    "age",
    "emit",
    "log_to_stderr",
    "open_store",
    "parse_duration",
    "print_table",
    "report_error",
    "require_thread",
    "run",
    "store_argument",
    "store_location",
    "store_url",
    "to_jsonable",
]

T = TypeVar("T")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_LONGEST = 100 * 365 * 86_400  # a longer age is a typo, and past datetime's range


class ExitCode(IntEnum):
    OK = 0
    FINDINGS = 1
    USAGE = 2
    STORE = 3
    WRITES_HELD = 4
    """``thread diagnose``: the thread goes on, but writes await reconciliation."""
    DEFINITION = 5
    """The agent definition is invalid (``AGENT_COMPILATION_FAILED``): fix the code, not the
    command line or the store."""


class CliError(Exception):
    """A user-facing failure with a stable code, an exit code and JSON-safe details."""

    def __init__(
        self,
        code: str,
        message: str,
        exit_code: ExitCode = ExitCode.USAGE,
        context: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.exit_code = exit_code
        self.context = context or {}


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


_REFUSALS = frozenset({ErrorCode.REQUEST_NOT_FOUND, ErrorCode.REQUEST_STATE_CONFLICT})
"""An operator's action on a turn request the store refused (an unknown request, one in a
state the action does not apply to): a usage error, as an unknown or settled receipt is."""


def exit_code_for(exc: KernelError) -> ExitCode:
    if isinstance(exc, InvalidInputError | ConfigurationError | EffectError):
        return ExitCode.USAGE
    if exc.code in _REFUSALS:
        return ExitCode.USAGE
    if isinstance(exc, CheckpointIncompatibleError):
        return ExitCode.FINDINGS
    if isinstance(exc, AgentCompilationError):
        return ExitCode.DEFINITION
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


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, ids: Collection[str] = ()
) -> None:
    """A table whose ``ids`` columns are always whole: rather than cut or fold an id (two
    threads would look alike), the table is wider than the terminal. Other columns wrap."""
    table = Table()
    for index, header in enumerate(headers):
        if header in ids:
            longest = max([len(header), *(len(row[index]) for row in rows)])
            table.add_column(header, min_width=longest, overflow="fold")
        else:
            table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*row)
    unlimited = out.options.update(width=1_000_000, max_width=1_000_000)
    needed = Measurement.get(out, unlimited, table).minimum
    out.print(table, width=max(out.width, needed), crop=False)


def print_fields(rows: list[tuple[str, object]]) -> None:
    """Label/value lines with the values aligned (``status``, ``outbox stats``)."""
    width = max(len(label) for label, _ in rows) + 1
    for label, value in rows:
        out.print(f"{label:<{width}}{value}", markup=False)


def store_url(store: str | None) -> str:
    """A store URL from ``--store``/``IK_STORE``; a plain path names a SQLite file."""
    if not store or not store.strip():
        raise CliError("STORE_REQUIRED", "give the store with --store or IK_STORE")
    text = store.strip()
    return text if "://" in text else sqlite_url(text)


def store_argument(store: str | None) -> str:
    """`` --store STORE`` for a command to suggest, as the operator gave it (quoted for a
    shell, password hidden); empty when the store came from ``IK_STORE``, which the suggested
    command reads as well."""
    if not store or store == os.environ.get("IK_STORE"):
        return ""
    return f" --store {shlex.quote(redact(store))}"


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
    """Open the store and close it after.

    Only ``create`` (the ``migrate`` command) creates a SQLite file or applies migrations; any
    other command refuses a missing file (``STORE_NOT_FOUND``) or a missing or older schema
    (``STORE_SCHEMA_MISSING``) and changes nothing. A command needs few connections, so a
    PostgreSQL pool stays at ``pool_size``.
    """
    url, location = store_location(store)
    path = location.path
    migrate = f"intention-kernel migrate{store_argument(store)}"
    if path is not None and not create and not path.exists():
        raise CliError("STORE_NOT_FOUND", f"no SQLite store at {path} (create one with: {migrate})")
    options: dict[str, Any] = {"migrate": create}
    if location.backend == "postgresql":
        options = {"setup": create, "min_size": 1, "max_size": pool_size}
    elif location.backend == "memory":
        options = {}
    try:
        opened = await open_durability(url, **options)
    except StoreSchemaError as exc:
        if exc.code is ErrorCode.STORE_SCHEMA_MISSING and "found" in exc.context:
            found, expected = exc.context["found"], exc.context.get("expected")
            raise CliError(
                "STORE_SCHEMA_MISSING",
                f"the store has schema version {found} and this version needs {expected}:"
                f" run {migrate}",
                ExitCode.STORE,
                {"found": found, "expected": expected},
            ) from None
        raise
    try:
        yield opened
    finally:
        await opened.close()


class _Redacted(logging.Filter):
    """Hides passwords in every record (a driver's message may quote a URL)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = ()
        return True


@contextmanager
def log_to_stderr() -> Iterator[None]:
    """The library's progress and warnings (a relay's, a worker's) on stderr while the
    command runs (and only then), with passwords hidden."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.addFilter(_Redacted())
    logger = logging.getLogger("intention_kernel")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30m``, ``12h``, ``30d``, ``2w`` (``1.5h`` too). A unit is required: a bare
    number would silently mean seconds, and a retention of seconds deletes nearly everything."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    seconds = -1.0 if match is None else float(match.group(1)) * _UNITS[match.group(2)]
    if not 0 <= seconds <= _LONGEST:
        raise CliError(
            "INVALID_DURATION",
            f"{text!r} is not a duration like 90s, 30m, 12h, 30d or 2w (at most 100 years)",
        )
    return timedelta(seconds=seconds)


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
    except (typer.Exit, typer.Abort):
        raise
    except CliError as exc:
        _fail(as_json, exc.code, exc.message, exc.exit_code, exc.context)
    except KernelError as exc:
        _fail(as_json, str(exc.code), exc.message, exit_code_for(exc), exc.context)
    except OSError as exc:
        _fail(as_json, "STORE_UNAVAILABLE", f"{type(exc).__name__}: {exc}", ExitCode.STORE, {})
    except Exception as exc:
        if os.environ.get("IK_DEBUG") == "1":
            raise
        _fail(
            as_json,
            "INTERNAL_ERROR",
            f"unexpected {type(exc).__name__}: {exc} (a bug: IK_DEBUG=1 shows where)",
            ExitCode.STORE,
            {},
        )


_SHOWN = ("thread_id", "setting", "scheme", "found", "expected", "secret_env", "filesystem")


def report_error(
    as_json: bool, code: str, message: str, context: dict[str, Any], hint: str = ""
) -> None:
    """Print an error: one JSON document on stdout with ``--json``, and always the line
    ``error: [CODE] message (details)`` on stderr (``hint``, if any, on the next line)."""
    message = redact(message)
    context = {k: redact(v) if isinstance(v, str) else v for k, v in context.items()}
    if as_json:
        payload = {"error": {"code": code, "message": message, "context": context}}
        print(json.dumps(to_jsonable(payload), sort_keys=True))
    safe = {k: v for k, v in context.items() if k in _SHOWN}
    detail = " (" + ", ".join(f"{k}={v}" for k, v in safe.items()) + ")" if safe else ""
    err.print(f"error: [{code}] {message}{detail}", markup=False)
    if hint:
        err.print(hint, markup=False)


def _fail(
    as_json: bool, code: str, message: str, exit_code: ExitCode, context: dict[str, Any]
) -> None:
    report_error(as_json, code, message, context)
    raise typer.Exit(int(exit_code))


def run(as_json: bool, body: Callable[[], Awaitable[T]]) -> T:
    """Run an async command body with errors mapped to exit codes."""
    with _mapped(as_json):
        return asyncio.run(_call(body))
    raise AssertionError("unreachable")  # pragma: no cover


async def _call(body: Callable[[], Awaitable[T]]) -> T:
    return await body()


async def require_thread(store: DurabilityStore, thread_id: str) -> KernelCheckpoint | None:
    """The thread's checkpoint; ``THREAD_NOT_FOUND`` when it has neither commits nor receipts."""
    checkpoint = await store.load_checkpoint(thread_id)
    if checkpoint is None and not await store.list_receipts(thread_id=thread_id, limit=1):
        raise CliError("THREAD_NOT_FOUND", f"no thread {thread_id!r} in this store")
    return checkpoint
