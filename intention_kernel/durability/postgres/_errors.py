"""The one choke point where asyncpg and PostgreSQL errors become typed errors.

Most specific match first. Serialization failures and deadlocks (``40001``/``40P01``) mean the
server rolled the transaction back, so ``retrying`` runs the whole short transaction again, a
bounded number of times with jitter; it is never wrapped around a provider call. A lost
connection is ``STORE_UNAVAILABLE`` and retryable: the turn's retry finds a commit that did
happen (ambiguous commit) by its stored turn. Everything else is not retryable. ``bounded``
puts a time limit on a statement: one that did not finish in time is ``STORE_BUSY``.

A connection the server refuses for a reason an operator fixes in the URL (the database or
the role does not exist, the password is wrong, a parameter the driver cannot use) is a
``ConfigurationError`` with the server's own words, never the URL's password.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import asyncpg

from ...contracts.errors import (
    ConfigurationError,
    DurabilityError,
    ErrorCode,
    KernelError,
    StoreSchemaError,
)
from .._urls import redact

__all__ = [
    "MAX_ATTEMPTS",
    "TIMED_OUT",
    "bounded",
    "create_schema_hint",
    "map_error",
    "retrying",
    "translated",
]

T = TypeVar("T")

MAX_ATTEMPTS = 5
TIMED_OUT = "a database statement did not finish in time"

_RETRY_STATES = frozenset({"40001", "40P01"})
# Raised by asyncpg before anything was sent (a pooled connection the server already closed
# is still finishing its shutdown): the statement never ran, so running it again is safe.
_NOT_SENT = (asyncpg.exceptions.InternalClientError,)

# (SQLSTATE or class prefix, code, retryable, safe message); exact states before classes.
_STATES: tuple[tuple[str, ErrorCode, bool, str], ...] = (
    ("40001", ErrorCode.STORE_BUSY, True, "serialization failure persisted after retries"),
    ("40P01", ErrorCode.STORE_BUSY, True, "deadlock persisted after retries"),
    ("55P03", ErrorCode.STORE_BUSY, True, "a database lock was not available in time"),
    ("57014", ErrorCode.STORE_BUSY, True, "the statement was cancelled (timeout)"),
    ("57P01", ErrorCode.STORE_UNAVAILABLE, True, "the database server is shutting down"),
    ("57P02", ErrorCode.STORE_UNAVAILABLE, True, "the database server crashed"),
    ("57P03", ErrorCode.STORE_UNAVAILABLE, True, "the database server is starting up"),
    ("53300", ErrorCode.STORE_UNAVAILABLE, True, "too many database connections"),
    ("25006", ErrorCode.STORE_READ_ONLY, False, "the database is read-only (a standby?)"),
    ("53100", ErrorCode.STORE_FULL, False, "the database disk is full"),
    ("08", ErrorCode.STORE_UNAVAILABLE, True, "the database connection failed"),
    ("53", ErrorCode.STORE_FULL, False, "the database ran out of resources"),
)

_SCHEMA_STATES = frozenset({"42P01", "3F000", "42703"})

# The server refused the connection for what the URL says (which database, which role).
_SETTING_STATES: dict[str, str] = {
    "3D000": "check the database name in the store URL",
    "28000": "check the user name in the store URL and pg_hba.conf",
    "28P01": "check the user name and password",
}


def _refused(exc: BaseException, state: str) -> ConfigurationError:
    reason = redact(str(getattr(exc, "message", "") or exc))
    return ConfigurationError(
        f"the server refused the connection: {reason}; {_SETTING_STATES[state]}",
        context={"setting": "url", "sqlstate": state},
    )


def create_schema_hint(schema: str | None = None) -> str:
    """What to run when the schema is missing or behind, for a caller with or without a store
    object: the ``migrate`` command (with the schema, when it is not the default) or the open
    option that applies the migrations."""
    query = "" if schema in (None, "intention_kernel") else f", with ?schema={schema}"
    return (
        "create or upgrade it: run intention-kernel migrate --store URL (the store's"
        f" postgresql:// URL{query}), or open the store with setup=True"
        " (PostgresDurability.open(url, setup=True) or open_durability(url, setup=True))"
    )


def map_error(exc: BaseException) -> KernelError | None:
    """The typed error for a driver/network exception, or ``None`` if it is not one."""
    if isinstance(exc, KernelError):
        return exc
    if isinstance(exc, asyncpg.exceptions.ClientConfigurationError):
        return ConfigurationError(
            f"the PostgreSQL driver refused a connection parameter: {redact(str(exc))}",
            context={"setting": "url"},
        )
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        if state in _SETTING_STATES:
            return _refused(exc, state)
        if state in _SCHEMA_STATES:
            return StoreSchemaError(
                f"the store schema is missing: {create_schema_hint()}",
                code=ErrorCode.STORE_SCHEMA_MISSING,
                context={"sqlstate": state},
            )
        for prefix, code, retryable, message in _STATES:
            if state == prefix or (len(prefix) == 2 and state.startswith(prefix)):
                return DurabilityError(
                    message, code=code, retryable=retryable, context={"sqlstate": state}
                )
        return DurabilityError(
            "the database refused the operation",
            code=ErrorCode.STORE_ERROR,
            context={"sqlstate": state},
        )
    if isinstance(
        exc,
        asyncpg.InterfaceError
        | asyncpg.exceptions.InternalClientError
        | ConnectionError
        | OSError
        | TimeoutError
        | asyncio.TimeoutError,
    ):
        return DurabilityError(
            "the database connection was lost or could not be opened",
            code=ErrorCode.STORE_UNAVAILABLE,
            retryable=True,
            context={"cause": type(exc).__name__},
        )
    return None


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise driver errors as typed errors, chained to the cause."""
    try:
        yield
    except KernelError:
        raise
    except Exception as exc:
        mapped = map_error(exc)
        if mapped is None:
            raise
        raise mapped from exc


async def retrying(
    transaction: Callable[[], Awaitable[T]],
    *,
    attempts: int = MAX_ATTEMPTS,
    base_delay: float = 0.005,
) -> T:
    """Run one short transaction, again on serialization failure or deadlock (rolled back
    by the server) or when the driver failed before sending it.

    ``transaction`` must be a complete transaction including the logic that chose its SQL; it
    must never contain a provider call.
    """
    for attempt in range(1, attempts + 1):
        try:
            with translated():
                return await transaction()
        except DurabilityError as exc:
            cause = exc.__cause__
            state = getattr(cause, "sqlstate", None)
            if (state not in _RETRY_STATES and not isinstance(cause, _NOT_SENT)) or (
                attempt == attempts
            ):
                raise
            await asyncio.sleep(random.uniform(0, base_delay * 2**attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def _timed_out(seconds: float) -> DurabilityError:
    return DurabilityError(
        TIMED_OUT, code=ErrorCode.STORE_BUSY, retryable=True, context={"timeout": seconds}
    )


async def bounded(statement: Callable[[float], Awaitable[T]], seconds: float) -> T:
    """``retrying(statement)``, all of it within ``seconds``, the wait for a connection
    included: a row lock held by a stuck session or an exhausted pool must not hang a turn.

    ``statement(t)`` must end within ``t`` seconds, what is left of ``seconds`` for that
    attempt: asyncpg's per-call timeout (which also cancels the statement on the server) and
    the lanes' bounded wait (one timer a statement, not a timeout scope around it). A timeout
    is ``STORE_BUSY``, retryable; for a write its outcome is unknown, like a lost connection
    (the retry finds a commit that did happen).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    try:
        return await retrying(lambda: statement(max(deadline - loop.time(), 0.001)))
    except DurabilityError as exc:
        if isinstance(exc.__cause__, TimeoutError):
            raise _timed_out(seconds) from exc.__cause__
        raise
