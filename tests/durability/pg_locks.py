"""Row locks held from another connection, so that a store's statement waits in flight and the
statements arriving meanwhile queue behind it (group commit and group acquire tests)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg


async def lock_lease(dsn: str, schema: str, thread_id: str) -> asyncpg.Connection:
    """Lock one lease row in an open transaction (``unlock`` ends it): a statement that needs
    the row (a commit fencing on it, an acquire taking it) waits, and the statements of its
    kind arriving meanwhile queue behind it."""
    conn = await asyncpg.connect(dsn)
    await conn.execute("BEGIN")
    await conn.execute(
        f'SELECT 1 FROM "{schema}".leases WHERE thread_id = $1 FOR UPDATE', thread_id
    )
    return conn


async def unlock(conn: asyncpg.Connection) -> None:
    await conn.execute("ROLLBACK")
    await conn.close()


async def waiting_on_lock(dsn: str, schema: str) -> int:
    """The backend of this schema's statement that waits for a held lease row (bounded)."""
    conn = await asyncpg.connect(dsn)
    try:
        for _ in range(2000):
            pid = await conn.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database() AND position($1 in query) > 0 LIMIT 1",
                f'"{schema}".',
            )
            if pid is not None:
                return int(pid)
            await asyncio.sleep(0.005)
        raise AssertionError("no statement waited for the held lease")
    finally:
        await conn.close()


async def queued(batch: Any, count: int) -> None:
    """Until ``count`` writes wait in a store's batch queue (bounded)."""
    for _ in range(2000):
        if batch.queued >= count:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{batch.queued} writes queued, expected {count}")


async def cancel_queued_then_unlock(
    tasks: list[asyncio.Task[Any]], index: int, blocker: asyncpg.Connection
) -> list[Any]:
    """Cancel the queued turn ``tasks[index]`` (it must keep waiting for its write's outcome),
    then let the queue go (``unlock``): every turn's outcome, exceptions included (bounded)."""
    tasks[index].cancel()
    await asyncio.sleep(0.05)
    assert not tasks[index].done()  # it waits for its write's outcome, not for its cancel
    await unlock(blocker)
    return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
