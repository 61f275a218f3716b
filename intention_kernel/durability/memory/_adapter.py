"""``MemoryDurability``: the full durability contract in one process. **Test-only.**

State lives in this process and is lost with it; use it for application tests, evaluations and
examples, never in production. It stores JSON text, so every value it hands out is a fresh copy.
``MemoryStore`` can be shared by several ``MemoryDurability`` instances to model a restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.codec import DEFAULT_LIMITS, JsonLimits
from ...contracts.errors import (
    CheckpointCorruptError,
    DurabilityError,
    ErrorCode,
    LeaseLostError,
)
from ...contracts.events import StoredEvent
from ...contracts.receipts import (
    EffectIdentity,
    EffectReceipt,
    ReceiptStatus,
    ReconciliationRecord,
)
from ...contracts.turns import DurableTurnResult
from ...crashpoints import CrashPoint, crash_point
from .. import _turns
from .._documents import (
    decode_model,
    decode_turn,
    encode_model,
    is_pruned,
    unreadable,
    unreadable_receipt,
)
from .._ledger import EffectStart, resolve_uncertain, start_effect
from ..engine import DurabilityEngine, Lease, OpenedTurn, Reconciliation, StoredTurn, TurnCommit
from ._inspect import MemoryInspection
from ._outbox import Delivery, MemoryOutboxSource

__all__ = ["MemoryDurability", "MemoryStore"]


@dataclass(slots=True)
class _Turn:
    fingerprint: str | None
    result_json: str
    revision: int


@dataclass
class MemoryStore:
    """The state behind one or more ``MemoryDurability`` instances (JSON text only)."""

    turns: dict[tuple[str, str], _Turn] = field(default_factory=dict)
    heads: dict[str, tuple[int, str]] = field(default_factory=dict)  # revision, turn_id
    receipts: dict[tuple[str, str], str] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)
    outbox: list[str | None] = field(default_factory=list)  # None once pruned
    deliveries: dict[int, Delivery] = field(default_factory=dict)  # by outbox position
    relay_floor: int = 1  # every position below is delivered, dead or pruned
    reconciliations: list[str] = field(default_factory=list)
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    committed_at: dict[tuple[str, str], datetime] = field(default_factory=dict)
    head_facts: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """Per head: its agent fingerprint and pending interaction kind, as committed (what the
    SQL stores keep on the head row for the listing filters)."""


class MemoryDurability(MemoryOutboxSource, MemoryInspection, DurabilityEngine[Lease]):
    """In-process durability for tests. Implements every rule of the contract in one process,
    and ``OutboxSource`` for the relay."""

    telemetry_system: str | None = None  # no OpenTelemetry db.system.name: the store is in-process

    def __init__(
        self,
        store: MemoryStore | None = None,
        *,
        lock_timeout: float = 30.0,
        json_limits: JsonLimits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__(lock_timeout=lock_timeout, json_limits=json_limits)
        self.store = store if store is not None else MemoryStore()

    # ---------------------------------------------------------------- turns

    @asynccontextmanager
    async def storage_open_turn(
        self, thread_id: str, turn_id: str
    ) -> AsyncIterator[OpenedTurn[Lease]]:
        prior = self._read_turn(thread_id, turn_id)
        if prior is not None:
            yield OpenedTurn(prior, None)
            return
        async with self.storage_lease(thread_id) as lease:
            prior = self._read_turn(thread_id, turn_id)
            yield OpenedTurn(prior, lease, self._head(thread_id))

    @asynccontextmanager
    async def storage_lease(self, thread_id: str) -> AsyncIterator[Lease]:
        lock = self.store.locks.setdefault(thread_id, asyncio.Lock())
        try:
            # Not ``wait_for``: on Python 3.11 it returns a result that raced a cancellation
            # and so swallows the cancel (with the lock taken).
            async with asyncio.timeout(self.lock_timeout):
                await lock.acquire()
        except TimeoutError:
            raise DurabilityError(
                "timed out waiting for the thread lease",
                code=ErrorCode.LOCK_TIMEOUT,
                retryable=True,
                context={"thread_id": thread_id, "timeout": self.lock_timeout},
            ) from None
        try:
            epoch = self.store.epochs.get(thread_id, 0) + 1
            self.store.epochs[thread_id] = epoch
            yield Lease(thread_id, epoch)
        finally:
            lock.release()

    def _fence(self, lease: Lease) -> None:
        current = self.store.epochs.get(lease.thread_id, 0)
        if current != lease.epoch:
            raise LeaseLostError(
                context={"thread_id": lease.thread_id, "epoch": lease.epoch, "current": current}
            )

    def _read_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        row = self.store.turns.get((thread_id, turn_id))
        if row is None:
            return None
        result = decode_turn(row.result_json, thread_id=thread_id, turn_id=turn_id)
        return StoredTurn(result, row.fingerprint)

    def _head(self, thread_id: str) -> KernelCheckpoint | None:
        head = self.store.heads.get(thread_id)
        if head is None:
            return None
        turn = self._read_turn(thread_id, head[1])
        return None if turn is None else turn.result.checkpoint

    async def storage_begin_effect(
        self, lease: Lease, turn_id: str, identity: EffectIdentity, now: datetime
    ) -> EffectStart:
        self._fence(lease)
        existing = self._receipt(lease.thread_id, identity.idempotency_key)
        start = start_effect(
            existing, identity, thread_id=lease.thread_id, turn_id=turn_id, now=now
        )
        if start.write:
            self._put_receipt(start.receipt)
        return start

    async def storage_finish_effect(
        self, lease: Lease, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        self._fence(lease)
        self._put_receipt(receipt)

    def _put_receipt(self, receipt: EffectReceipt) -> None:
        key = (receipt.thread_id, receipt.idempotency_key)
        self.store.receipts[key] = encode_model(receipt, limits=self.json_limits, what="receipt")

    def _receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        text = self.store.receipts.get((thread_id, idempotency_key))
        if text is None:
            return None
        return decode_model(EffectReceipt, text, what="receipt", thread_id=thread_id)

    async def storage_commit(self, lease: Lease, commit: TurnCommit) -> None:
        thread_id, turn_id = commit.thread_id, commit.turn_id
        self._fence(lease)
        if (thread_id, turn_id) in self.store.turns:
            raise _turns.already_committed(thread_id, turn_id)
        stored_revision = self.store.heads.get(thread_id, (0, ""))[0]
        _turns.check_revision(commit.loaded_revision, stored_revision, thread_id=thread_id)
        crash_point(CrashPoint.INSIDE_COMMIT, thread_id=thread_id, turn_id=turn_id)
        # Everything above can fail; nothing below can, so the commit is all or nothing.
        revision = commit.revision
        self.store.turns[(thread_id, turn_id)] = _Turn(
            commit.fingerprint, commit.result_json, revision
        )
        self.store.committed_at[(thread_id, turn_id)] = self._now()
        self.store.heads[thread_id] = (revision, turn_id)
        self.store.head_facts[thread_id] = (commit.agent_fingerprint, commit.pending_interaction)
        for event, text in zip(commit.events, commit.events_json, strict=True):
            self.store.outbox.append(text)
            self.store.deliveries[len(self.store.outbox)] = Delivery(
                event.thread_id, event.occurred_at
            )

    async def storage_reconcile(
        self, decision: Reconciliation, lease: Lease | None
    ) -> EffectReceipt:
        if lease is not None:
            self._fence(lease)
        existing = self._receipt(decision.thread_id, decision.idempotency_key)
        last = self._last_reconciliation(decision) if decision.correct else None
        receipt, record = resolve_uncertain(
            existing,
            decision.outcome,
            thread_id=decision.thread_id,
            idempotency_key=decision.idempotency_key,
            value=decision.value,
            note=decision.note,
            actor=decision.actor,
            now=self._now(),
            holds_lease=lease is not None,
            correct=decision.correct,
            last=last,
        )
        self._put_receipt(receipt)
        self.store.reconciliations.append(encode_model(record, what="reconciliation"))
        return receipt

    def _last_reconciliation(self, decision: Reconciliation) -> ReconciliationRecord | None:
        for text in reversed(self.store.reconciliations):
            record = decode_model(ReconciliationRecord, text, what="reconciliation")
            if (record.thread_id, record.idempotency_key) == (
                decision.thread_id,
                decision.idempotency_key,
            ):
                return record
        return None

    async def storage_close(self) -> None:
        return None

    # ---------------------------------------------------------------- reading back

    async def storage_read_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        return self._read_turn(thread_id, turn_id)

    async def storage_load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        return self._head(thread_id)

    async def storage_list_turns(
        self, thread_id: str, after_revision: int, limit: int
    ) -> list[DurableTurnResult]:
        rows = sorted(
            (row.revision, turn_id)
            for (t, turn_id), row in self.store.turns.items()
            if t == thread_id and row.revision > after_revision and not is_pruned(row.result_json)
        )
        results = []
        for _, turn_id in rows[:limit]:
            turn = self._read_turn(thread_id, turn_id)
            assert turn is not None
            results.append(turn.result)
        return results

    async def storage_get_receipt(
        self, thread_id: str, idempotency_key: str
    ) -> EffectReceipt | None:
        return self._receipt(thread_id, idempotency_key)

    async def storage_list_receipts(
        self, status: ReceiptStatus | None, thread_id: str | None, limit: int
    ) -> list[EffectReceipt]:
        receipts = [
            self._listed_receipt(t, key, text)
            for (t, key), text in self.store.receipts.items()
            if thread_id is None or t == thread_id
        ]
        if status is ReceiptStatus.UNCERTAIN:
            # Also interrupted ``prepared`` receipts (no live lease holder), as stored.
            chosen = [r for r in receipts if self._awaits_operator(r)]
        else:
            chosen = [r for r in receipts if status is None or r.status is status]
        chosen.sort(key=lambda r: (r.updated_at, r.id))
        return chosen[:limit]

    @staticmethod
    def _listed_receipt(thread_id: str, key: str, text: str) -> EffectReceipt:
        """A receipt for a listing: a corrupt one as a placeholder (needs an operator)."""
        try:
            return decode_model(EffectReceipt, text, what="receipt", thread_id=thread_id)
        except CheckpointCorruptError as exc:
            return unreadable_receipt(
                thread_id=thread_id, idempotency_key=key, reason=unreadable(exc)
            )

    async def storage_reconciliations(
        self, thread_id: str | None, idempotency_key: str | None
    ) -> list[ReconciliationRecord]:
        records = [
            decode_model(ReconciliationRecord, text, what="reconciliation")
            for text in self.store.reconciliations
        ]
        return [
            r
            for r in records
            if (thread_id is None or r.thread_id == thread_id)
            and (idempotency_key is None or r.idempotency_key == idempotency_key)
        ]

    async def storage_read_outbox(
        self, thread_id: str | None, turn_id: str | None, after_position: int, limit: int
    ) -> list[StoredEvent]:
        events: list[StoredEvent] = []
        for position, text in enumerate(self.store.outbox, start=1):
            if position <= after_position or text is None:
                continue
            stored = self._stored(position)
            if stored is None:
                continue
            event = stored.event
            if thread_id is not None and event.thread_id != thread_id:
                continue
            if turn_id is not None and event.turn_id != turn_id:
                continue
            assert stored is not None
            events.append(stored)
            if len(events) >= limit:
                break
        return events
