"""The state of the test-only memory store, shared by its role objects (JSON text only)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.codec import JsonLimits
from ...contracts.errors import CheckpointCorruptError
from ...contracts.events import KernelEvent, StoredEvent
from ...contracts.inbox import StoredSchedule
from ...contracts.receipts import EffectReceipt
from .._documents import decode_model, decode_turn, encode_model, unreadable, unreadable_event
from .._ledger import needs_operator
from .._schedule_role import TimerRow
from ..storage import StoredTurn
from ._flow import FlowState

__all__ = ["Delivery", "MemoryStore", "TurnRow"]


@dataclass(slots=True)
class Delivery:
    """Delivery state of one outbox position."""

    thread_id: str
    occurred_at: datetime
    revision: int = 0
    """The thread revision its turn committed."""
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


@dataclass(slots=True)
class TurnRow:
    fingerprint: str | None
    result_json: str
    revision: int


@dataclass
class MemoryStore:
    """The state behind one or more ``MemoryDurability`` instances (JSON text only)."""

    turns: dict[tuple[str, str], TurnRow] = field(default_factory=dict)
    heads: dict[str, tuple[int, str]] = field(default_factory=dict)  # revision, turn_id
    receipts: dict[tuple[str, str], str] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)
    outbox: list[str | None] = field(default_factory=list)  # None once pruned
    deliveries: dict[int, Delivery] = field(default_factory=dict)  # by outbox position
    relay_floor: int = 1  # every position below is delivered, dead or pruned
    relay_partitions: dict[tuple[int, int], tuple[str, datetime]] = field(default_factory=dict)
    """Partition leases by ``(count, index)``: holder and until when."""
    reconciliations: list[str] = field(default_factory=list)
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    committed_at: dict[tuple[str, str], datetime] = field(default_factory=dict)
    inbox: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Turn requests by ``(thread_id, turn_id)``, as rows (``memory._inbox``)."""
    inbox_position: int = 0
    progress: dict[tuple[str, str], list[tuple[int, str, datetime]]] = field(default_factory=dict)
    """Per turn: its progress items as ``(seq, JSON text, written at)``."""
    flow: FlowState = field(default_factory=FlowState)
    """Budget counters and provider slots (``memory._flow``)."""
    schedules: dict[str, StoredSchedule] = field(default_factory=dict)
    """Schedule rows by id (``memory._schedules``)."""
    timers: dict[tuple[str, str], TimerRow] = field(default_factory=dict)
    """Timers by ``(thread_id, turn_id)``."""
    head_facts: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """Per head: its agent fingerprint and pending interaction kind, as committed (what the
    SQL stores keep on the head row for the listing filters)."""

    def event(self, position: int) -> KernelEvent | None:
        text = self.outbox[position - 1]
        return None if text is None else decode_model(KernelEvent, text, what="outbox event")

    def readable(self, position: int) -> tuple[KernelEvent | None, str | None]:
        """The event at ``position`` and ``None``, or a placeholder and why it is unreadable
        (the delivery state, made at commit, knows its thread)."""
        try:
            return self.event(position), None
        except CheckpointCorruptError as exc:
            state = self.deliveries.get(position)
            reason = unreadable(exc)
            thread_id = "" if state is None else state.thread_id
            placeholder = unreadable_event(
                position=position, thread_id=thread_id, turn_id="", sequence=0, reason=reason
            )
            return placeholder, reason

    def delivery(self, position: int) -> Delivery | None:
        """The delivery state of ``position`` (``None`` once pruned)."""
        state = self.deliveries.get(position)
        if state is None:
            event, _ = self.readable(position)
            if event is None:
                return None
            turn = self.turns.get((event.thread_id, event.turn_id))
            state = Delivery(
                event.thread_id, event.occurred_at, 0 if turn is None else turn.revision
            )
            self.deliveries[position] = state
        return state

    def stored_event(self, position: int) -> StoredEvent | None:
        event, corrupt = self.readable(position)
        state = self.delivery(position)
        if event is None or state is None:
            return None
        return StoredEvent(
            event=event,
            position=position,
            revision=state.revision,
            delivered_at=state.delivered_at,
            attempts=state.attempts,
            last_error=state.last_error,
            dead=state.dead,
            corrupt=corrupt,
        )

    def read_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        row = self.turns.get((thread_id, turn_id))
        if row is None:
            return None
        result = decode_turn(row.result_json, thread_id=thread_id, turn_id=turn_id)
        return StoredTurn(result, row.fingerprint)

    def head(self, thread_id: str) -> KernelCheckpoint | None:
        head = self.heads.get(thread_id)
        if head is None:
            return None
        turn = self.read_turn(thread_id, head[1])
        return None if turn is None else turn.result.checkpoint

    def receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        text = self.receipts.get((thread_id, idempotency_key))
        if text is None:
            return None
        return decode_model(EffectReceipt, text, what="receipt", thread_id=thread_id)

    def lease_held(self, thread_id: str) -> bool:
        lock = self.locks.get(thread_id)
        return lock is not None and lock.locked()

    def awaits_operator(self, receipt: EffectReceipt) -> bool:
        return needs_operator(receipt.status, lease_held=self.lease_held(receipt.thread_id))

    def put_receipt(self, receipt: EffectReceipt, limits: JsonLimits) -> None:
        key = (receipt.thread_id, receipt.idempotency_key)
        self.receipts[key] = encode_model(receipt, limits=limits, what="receipt")
