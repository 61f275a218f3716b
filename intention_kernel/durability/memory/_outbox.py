"""The ``OutboxSource`` half of ``MemoryDurability`` (test-only), kept apart from the turn engine.

Delivery state lives per outbox position in ``MemoryStore.deliveries``, created lazily from the
stored JSON. Each method runs without awaiting, so it is atomic within one event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ...contracts.errors import CheckpointCorruptError
from ...contracts.events import KernelEvent, StoredEvent
from ...contracts.outbox import OutboxStats
from .._documents import decode_model, unreadable, unreadable_event
from .._outbox_rules import Candidate, claimable, failed_attempt

if TYPE_CHECKING:
    from ._adapter import MemoryStore

__all__ = ["Delivery", "MemoryOutboxSource"]


@dataclass(slots=True)
class Delivery:
    """Delivery state of one outbox position."""

    thread_id: str
    occurred_at: datetime
    delivered_at: datetime | None = None
    attempts: int = 0
    last_error: str | None = None
    dead: bool = False
    next_attempt_at: datetime | None = None
    claimed_by: str | None = None
    claimed_until: datetime | None = None

    @property
    def done(self) -> bool:
        return self.delivered_at is not None or self.dead

    def claimed(self, now: datetime) -> bool:
        return self.claimed_until is not None and self.claimed_until > now

    def held_by(self, relay_id: str, now: datetime) -> bool:
        return self.claimed_by == relay_id and self.claimed(now)

    def unclaim(self) -> None:
        self.claimed_by = None
        self.claimed_until = None


class MemoryOutboxSource:
    """``OutboxSource`` over a ``MemoryStore``; mixed into ``MemoryDurability``."""

    store: MemoryStore

    if TYPE_CHECKING:

        def _now(self) -> datetime: ...  # the durability engine's clock

    # ---------------------------------------------------------------- state

    def _event(self, position: int) -> KernelEvent | None:
        text = self.store.outbox[position - 1]
        return None if text is None else decode_model(KernelEvent, text, what="outbox event")

    def _readable(self, position: int) -> tuple[KernelEvent | None, str | None]:
        """The event at ``position`` and ``None``, or a placeholder and why it is unreadable
        (the delivery state, made at commit, knows its thread)."""
        try:
            return self._event(position), None
        except CheckpointCorruptError as exc:
            state = self.store.deliveries.get(position)
            reason = unreadable(exc)
            thread_id = "" if state is None else state.thread_id
            placeholder = unreadable_event(
                position=position, thread_id=thread_id, turn_id="", sequence=0, reason=reason
            )
            return placeholder, reason

    def _delivery(self, position: int) -> Delivery | None:
        """The delivery state of ``position`` (``None`` once pruned)."""
        state = self.store.deliveries.get(position)
        if state is None:
            event, _ = self._readable(position)
            if event is None:
                return None
            state = Delivery(event.thread_id, event.occurred_at)
            self.store.deliveries[position] = state
        return state

    def _stored(self, position: int) -> StoredEvent | None:
        event, corrupt = self._readable(position)
        state = self._delivery(position)
        if event is None or state is None:
            return None
        return StoredEvent(
            event=event,
            position=position,
            delivered_at=state.delivered_at,
            attempts=state.attempts,
            last_error=state.last_error,
            dead=state.dead,
            corrupt=corrupt,
        )

    def _advance_floor(self) -> int:
        """Skip the prefix of positions that are delivered or pruned (a dead event stays in
        view: it holds back its thread)."""
        floor = self.store.relay_floor
        while floor <= len(self.store.outbox):
            state = self._delivery(floor)
            if state is not None and state.delivered_at is None:
                break
            floor += 1
        self.store.relay_floor = floor
        return floor

    # ---------------------------------------------------------------- OutboxSource

    async def storage_claim(self, relay_id: str, limit: int, lease: float) -> list[StoredEvent]:
        now = self._now()
        candidates = (
            Candidate(p, d.thread_id, d.dead, d.claimed_until, d.next_attempt_at)
            for p in range(self._advance_floor(), len(self.store.outbox) + 1)
            if (d := self._delivery(p)) is not None and d.delivered_at is None
        )
        until = now + timedelta(seconds=lease)
        claimed: list[StoredEvent] = []
        broken: set[str] = set()  # threads held back by an unreadable event of this batch
        for position in claimable(candidates, now=now, limit=limit):
            state = self.store.deliveries[position]
            stored = self._stored(position)
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

    async def storage_mark_delivered(self, relay_id: str, positions: list[int]) -> int:
        now = self._now()
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

    async def storage_record_failure(
        self,
        relay_id: str,
        position: int,
        error: str,
        retry_in: float,
        max_attempts: int,
        permanent: bool,
    ) -> StoredEvent | None:
        now = self._now()
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
        return self._stored(position)

    async def storage_release(self, relay_id: str, positions: list[int]) -> int:
        now = self._now()
        released = 0
        for position in positions:
            state = self._delivery_at(position)
            if state is not None and not state.done and state.held_by(relay_id, now):
                state.unclaim()
                released += 1
        return released

    async def storage_requeue(self, positions: list[int] | None, thread_id: str | None) -> int:
        candidates = range(1, len(self.store.outbox) + 1) if positions is None else positions
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
            self.store.relay_floor = min(self.store.relay_floor, position)
            requeued += 1
        return requeued

    async def storage_dead_letters(self, limit: int) -> list[StoredEvent]:
        dead: list[StoredEvent] = []
        for position, state in sorted(self.store.deliveries.items()):
            if len(dead) >= limit:
                break
            if state.dead:
                stored = self._stored(position)
                if stored is not None:
                    dead.append(stored)
        return dead

    async def storage_prune_outbox(self, older_than: float) -> int:
        cutoff = self._now() - timedelta(seconds=older_than)
        pruned = 0
        for position, state in list(self.store.deliveries.items()):
            if state.delivered_at is not None and state.delivered_at < cutoff:
                self.store.outbox[position - 1] = None
                del self.store.deliveries[position]
                pruned += 1
        return pruned

    async def storage_outbox_stats(self) -> OutboxStats:
        now = self._now()
        pending = claimed = dead = delivered = 0
        blocked: set[str] = set()
        oldest: datetime | None = None
        for position in range(1, len(self.store.outbox) + 1):
            state = self._delivery(position)
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
        return OutboxStats(pending, claimed, dead, delivered, age, blocked_threads=len(blocked))

    def _delivery_at(self, position: int) -> Delivery | None:
        if not 1 <= position <= len(self.store.outbox):
            return None
        return self._delivery(position)
