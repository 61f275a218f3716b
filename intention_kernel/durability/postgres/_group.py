"""Group commit on PostgreSQL: the turn commits that are ready together go as one statement.

Why: with many turns in flight every commit pays its own round trip, statement, transaction
and WAL flush. ``Batch`` sends a commit alone when the store is idle and the commits that
queued meanwhile as one ``commit_group`` statement (``_sql``): one transaction, one WAL flush.

Each row keeps its own fence and head compare-and-set, so one turn's lost lease or conflict
never fails or commits another; the caller judges its row exactly as a single commit's
(``PostgresTurns``). An integrity error no row check foresaw refuses the statement as a whole:
each commit is then sent alone, so the offending one fails by itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg

from ..storage import TurnCommit
from ._batch import Batch
from ._connection import PgConnection
from ._lease import PgLease
from ._sql import Statements

__all__ = ["Commit", "commit_batch"]

Commit = tuple[PgLease, TurnCommit]
"""A turn's commit and the lease it is fenced by."""


def commit_batch(
    db: PgConnection, sql: Statements, send_one: Callable[[Commit], Awaitable[Any]]
) -> Batch[Commit]:
    """The commit path of one store: alone when idle, in groups when commits queue up."""

    async def send_many(group: Sequence[Commit]) -> Sequence[Any]:
        return await db.fetch(sql.commit_group, *_arguments(group))

    return Batch(
        thread_of=lambda queued: queued[1].thread_id,
        send_one=send_one,
        send_many=send_many,
        one_by_one=lambda exc: isinstance(exc.__cause__, asyncpg.IntegrityConstraintViolationError),
    )


def _arguments(group: Sequence[Commit]) -> list[Any]:
    """The arrays of ``commit_group``: one element per commit, then events and progress
    items each with the (1-based) row of their commit."""
    columns: list[list[Any]] = [[] for _ in range(9)]
    event_rows: list[int] = []
    sequences: list[int] = []
    events: list[str] = []
    item_rows: list[int] = []
    items: list[str] = []
    for k, (lease, commit) in enumerate(group, start=1):
        values = (
            commit.thread_id,
            lease.epoch,
            lease.owner,
            commit.turn_id,
            commit.revision,
            commit.fingerprint,
            commit.result_json,
            commit.agent_fingerprint,
            commit.pending_interaction,
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
        for event, encoded in zip(commit.events, commit.events_json, strict=True):
            event_rows.append(k)
            sequences.append(event.sequence)
            events.append(encoded)
        item_rows.extend(k for _ in commit.progress)
        items.extend(commit.progress)
    return [*columns, event_rows, sequences, events, item_rows, items]
