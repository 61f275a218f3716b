"""Taking a PostgreSQL thread lease: what the acquire statement returns, and the statement.

On a read-only session (a standby) the acquire is replaced by the replay SELECT, so a committed
turn still replays there. Acquires that queue while one is in flight go as one ``acquire_group``
statement (``acquire_batch``), each thread with its own outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...contracts.errors import KernelError
from ._batch import Batch
from ._connection import PgConnection, read_only
from ._errors import bounded
from ._lease import PgLease
from ._sql import Statements

__all__ = [
    "Acquire",
    "Acquired",
    "ReadOnly",
    "acquire_batch",
    "acquired_from",
    "replay_read_only",
]


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


@dataclass(frozen=True, slots=True)
class Acquire:
    """One acquisition: ``owner`` is its unique token; ``skip_committed``: a committed turn
    is replayed instead (no lease taken)."""

    thread_id: str
    turn_id: str
    owner: str
    skip_committed: bool


def acquire_batch(db: PgConnection, sql: Statements, ttl: float) -> Batch[Acquire]:
    """The acquire path of one store: each acquisition's row (or ``ReadOnly``), one statement
    for the acquisitions that queue up together. On a read-only session the replay SELECT
    replaces a skipping acquire, so a committed turn replays on a standby."""
    run = db.lanes.run

    async def send_one(one: Acquire) -> Any:
        async def statement(conn: Any, seconds: float) -> Any:
            if one.skip_committed and read_only(conn):
                return ReadOnly(
                    await conn.fetchrow(sql.replay, one.thread_id, one.turn_id, timeout=seconds)
                )
            return await conn.fetchrow(
                sql.acquire,
                one.thread_id,
                one.turn_id,
                one.owner,
                ttl,
                one.skip_committed,
                timeout=seconds,
            )

        return await bounded(lambda t: run(statement, t), db.statement_timeout)

    async def send_many(group: Sequence[Acquire]) -> Sequence[Any] | None:
        async def statement(conn: Any, seconds: float) -> Sequence[Any] | None:
            if read_only(conn):
                return None  # one by one: each as a read-only session answers it
            rows: Sequence[Any] = await conn.fetch(
                sql.acquire_group,
                [a.thread_id for a in group],
                [a.turn_id for a in group],
                [a.owner for a in group],
                ttl,
                [a.skip_committed for a in group],
                timeout=seconds,
            )
            return rows

        return await bounded(lambda t: run(statement, t), db.statement_timeout)

    return Batch(
        thread_of=lambda one: one.thread_id,
        send_one=send_one,
        send_many=send_many,
        # Refused as a whole (nothing taken): each alone, so only a refused one fails.
        one_by_one=lambda exc: isinstance(exc, KernelError) and not exc.retryable,
    )
