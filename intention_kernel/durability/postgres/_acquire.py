"""Taking a PostgreSQL thread lease: what the acquire statement returns, and the statement.

On a read-only session (a standby) the acquire is replaced by the replay SELECT, so a committed
turn still replays there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._connection import PgConnection
from ._errors import bounded
from ._lease import PgLease
from ._sql import Statements

__all__ = ["Acquired", "ReadOnly", "acquire_statement", "acquired_from", "replay_read_only"]


@dataclass(frozen=True, slots=True)
class Acquired:
    """What one acquire statement returned."""

    lease: PgLease | None
    trusted: bool
    """The row's checkpoint is current (see ``_try_acquire``): no ``load`` statement needed."""
    row: Any
    sent: float
    """Loop time the statement was sent: the lease is proven held until ``sent + ttl``."""


def acquired_from(row: Any, thread_id: str, owner: str, sent: float, epoch: Any) -> Acquired:
    """What an acquisition's row says (``epoch`` ``None``: the lease was held by another).
    The preloaded checkpoint is current only if the previous holder had released the lease
    before the statement's snapshot (a commit releases it in its own transaction)."""
    lease = None if epoch is None else PgLease(thread_id, epoch, owner)
    trusted = lease is not None and (
        (row["seen_rows"] == 0 and lease.epoch == 1) or row["released_epoch"] == lease.epoch - 1
    )
    return Acquired(lease, trusted, row, sent)


@dataclass(frozen=True, slots=True)
class ReadOnly:
    """The replay SELECT's row (``None``: not committed), sent instead of the acquire on a
    read-only session."""

    row: Any


async def replay_read_only(
    db: PgConnection, sql: Statements, thread_id: str, turn_id: str, refusal: Any
) -> Acquired:
    """On a read-only session: a committed turn is read with a plain SELECT (it replays
    there); any other turn is refused as the write would have been."""
    row = await db.fetchrow(sql.replay, thread_id, turn_id)
    if row is None:
        raise refusal
    return Acquired(None, False, row, 0.0)


async def acquire_statement(
    db: PgConnection, sql: Statements, ttl: float, thread_id: str, turn_id: str, owner: str
) -> Any:
    """The acquire statement, or the replay SELECT (its row wrapped in ``ReadOnly``) when
    the pooled session says it is read-only (``default_transaction_read_only``, a hot standby:
    both reported by the server on every connection since PostgreSQL 14)."""

    async def statement(conn: Any, seconds: float) -> Any:
        settings = conn.get_settings()
        if (
            getattr(settings, "default_transaction_read_only", "off") == "on"
            or getattr(settings, "in_hot_standby", "off") == "on"
        ):
            return ReadOnly(await conn.fetchrow(sql.replay, thread_id, turn_id, timeout=seconds))
        return await conn.fetchrow(
            sql.acquire,
            thread_id,
            turn_id,
            owner,
            ttl,
            True,
            timeout=seconds,
        )

    run = db.lanes.run
    return await bounded(lambda t: run(statement, t), db.statement_timeout)
