"""Table-driven check of the one place driver errors become typed errors."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from intention_kernel.contracts.errors import (
    DurabilityError,
    ErrorCode,
    KernelError,
    LeaseLostError,
    StoreSchemaError,
)
from intention_kernel.durability.postgres._errors import map_error, retrying, translated

E = asyncpg.exceptions

CASES: list[tuple[BaseException, type[KernelError], ErrorCode, bool]] = [
    (E.SerializationError("x"), DurabilityError, ErrorCode.STORE_BUSY, True),
    (E.DeadlockDetectedError("x"), DurabilityError, ErrorCode.STORE_BUSY, True),
    (E.LockNotAvailableError("x"), DurabilityError, ErrorCode.STORE_BUSY, True),
    (E.QueryCanceledError("x"), DurabilityError, ErrorCode.STORE_BUSY, True),
    (E.AdminShutdownError("x"), DurabilityError, ErrorCode.STORE_UNAVAILABLE, True),
    (E.CrashShutdownError("x"), DurabilityError, ErrorCode.STORE_UNAVAILABLE, True),
    (E.CannotConnectNowError("x"), DurabilityError, ErrorCode.STORE_UNAVAILABLE, True),
    (E.TooManyConnectionsError("x"), DurabilityError, ErrorCode.STORE_UNAVAILABLE, True),
    (E.ConnectionDoesNotExistError("x"), DurabilityError, ErrorCode.STORE_UNAVAILABLE, True),
    (E.ConnectionFailureError("x"), DurabilityError, ErrorCode.STORE_UNAVAILABLE, True),
    (E.ReadOnlySQLTransactionError("x"), DurabilityError, ErrorCode.STORE_READ_ONLY, False),
    (E.DiskFullError("x"), DurabilityError, ErrorCode.STORE_FULL, False),
    (E.OutOfMemoryError("x"), DurabilityError, ErrorCode.STORE_FULL, False),
    (E.UndefinedTableError("x"), StoreSchemaError, ErrorCode.STORE_SCHEMA_MISSING, False),
    (E.InvalidSchemaNameError("x"), StoreSchemaError, ErrorCode.STORE_SCHEMA_MISSING, False),
    (E.UndefinedColumnError("x"), StoreSchemaError, ErrorCode.STORE_SCHEMA_MISSING, False),
    (E.UniqueViolationError("x"), DurabilityError, ErrorCode.STORE_ERROR, False),
    (E.InternalServerError("x"), DurabilityError, ErrorCode.STORE_ERROR, False),
    (E.InterfaceError("connection is closed"), DurabilityError, ErrorCode.STORE_UNAVAILABLE, True),
    (E._base.InternalClientError("x"), DurabilityError, ErrorCode.STORE_UNAVAILABLE, True),
    (ConnectionResetError(), DurabilityError, ErrorCode.STORE_UNAVAILABLE, True),
    (OSError("refused"), DurabilityError, ErrorCode.STORE_UNAVAILABLE, True),
    (TimeoutError(), DurabilityError, ErrorCode.STORE_UNAVAILABLE, True),
]


@pytest.mark.parametrize(("error", "kind", "code", "retryable"), CASES)
def test_driver_errors_map_to_typed_errors(
    error: BaseException, kind: type[KernelError], code: ErrorCode, retryable: bool
) -> None:
    with pytest.raises(kind) as caught, translated():
        raise error
    assert caught.value.code == code
    assert caught.value.retryable is retryable
    assert caught.value.__cause__ is error
    assert "x" not in caught.value.message.split()  # driver text never leaks


def test_typed_errors_and_programming_errors_pass_through() -> None:
    lost = LeaseLostError()
    assert map_error(lost) is lost
    assert map_error(ValueError("bug")) is None
    with pytest.raises(ValueError, match="bug"), translated():
        raise ValueError("bug")


def test_serialization_failures_are_retried_whole_then_surface_as_retryable() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise E.SerializationError("conflict")
        return "ok"

    assert asyncio.run(retrying(flaky, base_delay=0.0001)) == "ok"
    assert calls == 3

    async def always() -> str:
        nonlocal calls
        calls += 1
        raise E.DeadlockDetectedError("deadlock")

    calls = 0
    with pytest.raises(DurabilityError) as caught:
        asyncio.run(retrying(always, attempts=4, base_delay=0.0001))
    assert calls == 4
    assert caught.value.code == ErrorCode.STORE_BUSY and caught.value.retryable


def test_other_errors_are_not_retried() -> None:
    calls = 0

    async def broken() -> None:
        nonlocal calls
        calls += 1
        raise E.ConnectionDoesNotExistError("gone")

    with pytest.raises(DurabilityError) as caught:
        asyncio.run(retrying(broken, base_delay=0.0001))
    assert calls == 1  # a lost connection may hide a commit: the caller decides
    assert caught.value.code == ErrorCode.STORE_UNAVAILABLE


async def test_a_fresh_database_says_how_to_create_the_schema() -> None:
    """A worker opening a schema nobody created is told what to run, as someone without a
    store object can: the migrate command or the open option; doing so then works."""
    import subprocess
    import sys

    from intention_kernel.contracts.errors import StoreSchemaError
    from intention_kernel.durability import open_durability
    from intention_kernel.durability.postgres import PostgresDurability
    from tests.support.postgres import drop_schema, require_postgres, scratch_schema

    dsn = await asyncio.to_thread(require_postgres)
    schema = scratch_schema("ik_fresh")
    url = f"{dsn}?schema={schema}"
    try:
        for opening in (
            lambda: PostgresDurability.open(dsn, schema=schema),
            lambda: open_durability(url),
        ):
            with pytest.raises(StoreSchemaError) as caught:
                await opening()
            message = caught.value.message
            assert caught.value.code is ErrorCode.STORE_SCHEMA_MISSING
            assert "intention-kernel migrate --store URL" in message
            assert f"?schema={schema}" in message and "setup=True" in message
            assert "setup()" not in message
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "intention_kernel.cli", "migrate", "--store", url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        store = await open_durability(url)
        await store.close()
    finally:
        await drop_schema(dsn, schema)
