"""The ``OutboxSource`` half of ``PostgresDurability``: delivery state on the outbox rows.

Every method is one statement, so one short transaction; no transaction stays open while a sink
publishes. Times come from the server clock (``now()``, the statement's transaction start).

Positions come from a ``bigserial`` taken at INSERT time, not at COMMIT: across threads a lower
position can become visible after a higher one. A thread's order is ``(revision, sequence)``
(``contracts.outbox``): on one database positions follow it, but the claim does not rely on
that, so a schema distributed by thread (docs/scale-out.md) keeps each thread in order.

``claim`` walks the undelivered rows in position order against the statement's snapshot, one
index probe per step, and stops when the batch is full: a thread is held back from its first
row that is dead, live-claimed or backing off, and its later rows are skipped. Its cost is the
batch plus the held-back threads, whatever the backlog or the planner's statistics. Each
thread's share of the walk is then taken as its first rows in thread order, locked with
``FOR UPDATE SKIP LOCKED`` (relays never wait on each other), and a row is kept only if no
earlier row of its thread was skipped or found held back: SKIP LOCKED silently skips rows
another transaction holds (a concurrent claim, mark or failure), and without that check a
skipped row would let a later row of its thread out of order. A claimed row that cannot be
read back is dead-lettered at once (its reason in ``last_error``) with the rest of its thread's
batch given back, so it holds back its own thread only; reads list it as a placeholder.

The statements are rendered in ``_outbox_sql``; the optional wake-up of relays is ``_notifier``.
"""

from __future__ import annotations

from typing import Any

from ...contracts.errors import CheckpointCorruptError, DurabilityError
from ...contracts.events import KernelEvent, StoredEvent
from ...contracts.outbox import (
    OutboxStats,
    Partition,
    PartitionLease,
    Partitions,
    delivery_order,
    served_partitions,
)
from .._documents import decode_model, unreadable, unreadable_event
from ._connection import PgConnection
from ._outbox_sql import OutboxStatements

__all__ = ["PostgresOutbox", "stored_event"]


def stored_event(row: Any) -> StoredEvent:
    """A ``StoredEvent`` with its delivery state from a row of ``EVENT_COLUMNS``; an
    unreadable document as a placeholder from the row's columns, ``corrupt`` saying why."""
    corrupt = None
    try:
        event = decode_model(
            KernelEvent, row["event"], what="outbox event", position=row["position"]
        )
    except CheckpointCorruptError as exc:
        corrupt = unreadable(exc)
        event = unreadable_event(
            position=row["position"],
            thread_id=row["thread_id"],
            turn_id=row["turn_id"],
            sequence=row["sequence"],
            reason=corrupt,
        )
    return StoredEvent(
        event=event,
        position=row["position"],
        revision=row["revision"],
        delivered_at=row["delivered_at"],
        attempts=row["attempts"],
        last_error=row["last_error"],
        dead=row["dead"],
        corrupt=corrupt,
    )


class PostgresOutbox:
    """``OutboxStorage`` over the ``outbox`` table (the facade has checked the arguments)."""

    def __init__(self, db: PgConnection, sql: OutboxStatements) -> None:
        self._db = db
        self._outbox_sql = sql
        self._indexed: set[int] = set()  # partition counts whose index this store has built

    async def claim(
        self, relay_id: str, limit: int, lease: float, partitions: Partitions | None
    ) -> list[StoredEvent]:
        if partitions is None:
            return await self._claim(self._outbox_sql.claim, relay_id, limit, lease)
        claimed: list[StoredEvent] = []
        statement = self._outbox_sql.claim_in(partitions.count)
        for index in sorted(partitions.served):  # one partition's index probe at a time
            claimed += await self._claim(statement, relay_id, limit - len(claimed), lease, index)
            if len(claimed) >= limit:
                break
        return delivery_order(claimed)

    async def _claim(
        self, statement: str, relay_id: str, limit: int, lease: float, *index: int
    ) -> list[StoredEvent]:
        rows = await self._db.fetch(statement, relay_id, limit, lease, *index)
        claimed = delivery_order(stored_event(r) for r in rows)
        if all(e.corrupt is None for e in claimed):
            return claimed
        events: list[StoredEvent] = []
        given_back: list[int] = []
        broken: set[str] = set()  # threads held back by an unreadable row of this batch
        for stored in claimed:
            thread_id = stored.event.thread_id
            if thread_id in broken:
                given_back.append(stored.position)
            elif stored.corrupt is not None:
                await self._db.execute_status(
                    self._outbox_sql.kill_unreadable, stored.position, relay_id, stored.corrupt
                )
                broken.add(thread_id)
            else:
                events.append(stored)
        if given_back:
            await self._db.execute_status(self._outbox_sql.release, given_back, relay_id)
        return events

    async def hold_partition(self, relay_id: str, partition: Partition, lease: float) -> Partitions:
        if partition.count not in self._indexed:
            await self._db.execute(self._outbox_sql.partition_index(partition.count))
            self._indexed.add(partition.count)
        row = await self._db.fetchrow(
            self._outbox_sql.hold_partition, relay_id, partition.count, partition.index, lease
        )
        return served_partitions(partition, row["mine"], row["live"])

    async def release_partition(self, relay_id: str, partition: Partition) -> bool:
        released = await self._db.execute_status(
            self._outbox_sql.release_partition, relay_id, partition.count, partition.index
        )
        return released > 0

    async def mark_delivered(self, relay_id: str, positions: list[int]) -> int:
        return await self._db.execute_status(self._outbox_sql.mark_delivered, positions)

    async def record_failure(
        self,
        relay_id: str,
        position: int,
        error: str,
        retry_in: float,
        max_attempts: int,
        permanent: bool,
    ) -> StoredEvent | None:
        row = await self._db.fetchrow(
            self._outbox_sql.record_failure,
            position,
            relay_id,
            error,
            retry_in,
            max_attempts,
            permanent,
        )
        return None if row is None else stored_event(row)

    async def release(self, relay_id: str, positions: list[int]) -> int:
        return await self._db.execute_status(self._outbox_sql.release, positions, relay_id)

    async def requeue(self, positions: list[int] | None, thread_id: str | None) -> int:
        return await self._db.execute_status(self._outbox_sql.requeue, positions, thread_id)

    async def dead_letters(self, limit: int) -> list[StoredEvent]:
        rows = await self._db.fetch(self._outbox_sql.dead_letters, limit)
        return [stored_event(r) for r in rows]

    async def prune(self, older_than: float) -> int:
        return await self._db.execute_status(self._outbox_sql.prune, older_than)

    async def stats(self) -> OutboxStats:
        try:
            row = await self._db.fetchrow(self._outbox_sql.stats)
        except DurabilityError as exc:
            if not str(exc.context.get("sqlstate", "")).startswith("22"):
                raise
            row = await self._db.fetchrow(self._outbox_sql.stats_tolerant)  # an unreadable row
        age = row["oldest_age"]
        leases = await self._db.fetch(self._outbox_sql.partition_leases)
        return OutboxStats(
            pending=row["pending"],
            claimed=row["claimed"],
            dead=row["dead"],
            delivered=row["delivered"],
            oldest_pending_age=None if age is None else max(0.0, float(age)),
            blocked_threads=row["blocked_threads"],
            partitions=tuple(PartitionLease(*lease) for lease in leases),
        )
