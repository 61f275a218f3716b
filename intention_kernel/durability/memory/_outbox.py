"""``MemoryOutbox``: the ``OutboxStorage`` role of the test-only memory store.

Delivery state lives per outbox position in ``MemoryStore.deliveries``, created lazily from the
stored JSON. Each method runs without awaiting, so it is atomic within one event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from ...contracts.events import StoredEvent
from ...contracts.outbox import (
    OutboxStats,
    Partition,
    PartitionLease,
    Partitions,
    served_partitions,
)
from .._outbox_rules import Candidate, claimable, failed_attempt, may_hold_partition
from .._writes import utc_now
from ._state import Delivery, MemoryStore

__all__ = ["MemoryOutbox"]


class MemoryOutbox:
    """``OutboxStorage`` over a ``MemoryStore``."""

    def __init__(self, state: MemoryStore, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.state = state
        self.clock = clock

    def _advance_floor(self) -> int:
        """Skip the prefix of positions that are delivered or pruned (a dead event stays in
        view: it holds back its thread)."""
        floor = self.state.relay_floor
        while floor <= len(self.state.outbox):
            state = self.state.delivery(floor)
            if state is not None and state.delivered_at is None:
                break
            floor += 1
        self.state.relay_floor = floor
        return floor

    # ---------------------------------------------------------------- OutboxSource

    async def claim(
        self, relay_id: str, limit: int, lease: float, partitions: Partitions | None
    ) -> list[StoredEvent]:
        now = self.clock()
        candidates = (
            Candidate(p, d.thread_id, d.dead, d.claimed_until, d.next_attempt_at)
            for p in range(self._advance_floor(), len(self.state.outbox) + 1)
            if (d := self.state.delivery(p)) is not None and d.delivered_at is None
        )
        until = now + timedelta(seconds=lease)
        claimed: list[StoredEvent] = []
        broken: set[str] = set()  # threads held back by an unreadable event of this batch
        for position in claimable(candidates, now=now, limit=limit, partitions=partitions):
            state = self.state.deliveries[position]
            stored = self.state.stored_event(position)
            assert stored is not None
            if state.thread_id in broken:
                continue
            if stored.corrupt is not None:
                state.dead, state.last_error, state.next_attempt_at = True, stored.corrupt, None
                broken.add(state.thread_id)
                continue
            state.claimed_by, state.claimed_until = relay_id, until
            claimed.append(stored)
        return claimed

    async def hold_partition(self, relay_id: str, partition: Partition, lease: float) -> Partitions:
        now = self.clock()
        leases = self.state.relay_partitions
        key = (partition.count, partition.index)
        holder, until = leases.get(key, (None, None))
        held = may_hold_partition(holder, until, relay_id, now)
        if held:
            leases[key] = (relay_id, now + timedelta(seconds=lease))
        live = [i for (n, i), (_, t) in leases.items() if n == partition.count and t > now]
        return served_partitions(partition, held, live)

    async def release_partition(self, relay_id: str, partition: Partition) -> bool:
        key = (partition.count, partition.index)
        holder, _ = self.state.relay_partitions.get(key, (None, None))
        if holder != relay_id:
            return False
        del self.state.relay_partitions[key]
        return True

    async def mark_delivered(self, relay_id: str, positions: list[int]) -> int:
        now = self.clock()
        changed = 0
        for position in positions:
            state = self._delivery_at(position)
            if state is None or state.delivered_at is not None:
                continue
            state.delivered_at = now
            state.dead = False
            state.unclaim()
            changed += 1
        return changed

    async def record_failure(
        self,
        relay_id: str,
        position: int,
        error: str,
        retry_in: float,
        max_attempts: int,
        permanent: bool,
    ) -> StoredEvent | None:
        now = self.clock()
        state = self._delivery_at(position)
        if state is None or state.done or not state.held_by(relay_id, now):
            return None
        after = failed_attempt(
            state.attempts,
            max_attempts=max_attempts,
            permanent=permanent,
            retry_in=retry_in,
            now=now,
        )
        state.attempts, state.dead, state.next_attempt_at = (
            after.attempts,
            after.dead,
            after.next_attempt_at,
        )
        state.last_error = error
        state.unclaim()
        return self.state.stored_event(position)

    async def release(self, relay_id: str, positions: list[int]) -> int:
        now = self.clock()
        released = 0
        for position in positions:
            state = self._delivery_at(position)
            if state is not None and not state.done and state.held_by(relay_id, now):
                state.unclaim()
                released += 1
        return released

    async def requeue(self, positions: list[int] | None, thread_id: str | None) -> int:
        candidates = range(1, len(self.state.outbox) + 1) if positions is None else positions
        requeued = 0
        for position in candidates:
            state = self._delivery_at(position)
            if state is None or not state.dead:
                continue
            if thread_id is not None and state.thread_id != thread_id:
                continue
            state.dead = False
            state.attempts = 0
            state.next_attempt_at = None
            state.unclaim()
            self.state.relay_floor = min(self.state.relay_floor, position)
            requeued += 1
        return requeued

    async def dead_letters(self, limit: int) -> list[StoredEvent]:
        dead: list[StoredEvent] = []
        for position, state in sorted(self.state.deliveries.items()):
            if len(dead) >= limit:
                break
            if state.dead:
                stored = self.state.stored_event(position)
                if stored is not None:
                    dead.append(stored)
        return dead

    async def prune(self, older_than: float) -> int:
        cutoff = self.clock() - timedelta(seconds=older_than)
        pruned = 0
        for position, state in list(self.state.deliveries.items()):
            if state.delivered_at is not None and state.delivered_at < cutoff:
                self.state.outbox[position - 1] = None
                del self.state.deliveries[position]
                pruned += 1
        return pruned

    async def stats(self) -> OutboxStats:
        now = self.clock()
        pending = claimed = dead = delivered = 0
        blocked: set[str] = set()
        oldest: datetime | None = None
        for position in range(1, len(self.state.outbox) + 1):
            state = self.state.delivery(position)
            if state is None:
                continue
            if state.delivered_at is not None:
                delivered += 1
            elif state.dead:
                dead += 1
                blocked.add(state.thread_id)
            else:
                pending += 1
                claimed += state.claimed(now)
                if oldest is None or state.occurred_at < oldest:
                    oldest = state.occurred_at
        age = None if oldest is None else max(0.0, (now - oldest).total_seconds())
        leases = tuple(
            PartitionLease(count, index, holder, until, until > now)
            for (count, index), (holder, until) in sorted(self.state.relay_partitions.items())
        )
        return OutboxStats(
            pending, claimed, dead, delivered, age, blocked_threads=len(blocked), partitions=leases
        )

    def _delivery_at(self, position: int) -> Delivery | None:
        if not 1 <= position <= len(self.state.outbox):
            return None
        return self.state.delivery(position)
