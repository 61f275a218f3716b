"""Record the statements a PostgreSQL store sends, at the driver (every connection, pooled or
not), so a test can count round trips per turn whatever path the store takes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from asyncpg.connection import Connection

_METHODS = ("execute", "executemany", "fetch", "fetchrow", "fetchval", "fetchmany")


@contextmanager
def recorded() -> Iterator[list[str]]:
    """Statements sent while the block runs, each squashed to one line."""
    sent: list[str] = []
    saved = [(name, getattr(Connection, name)) for name in _METHODS]

    def wrap(original: Any) -> Any:
        async def method(conn: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            sent.append(" ".join(query.split()))
            return await original(conn, query, *args, **kwargs)

        return method

    for name, original in saved:
        setattr(Connection, name, wrap(original))
    try:
        yield sent
    finally:
        for name, original in saved:
            setattr(Connection, name, original)
