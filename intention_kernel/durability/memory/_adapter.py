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

from pydantic import JsonValue

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.codec import DEFAULT_LIMITS, JsonLimits
from ...contracts.errors import DurabilityError, ErrorCode, LeaseLostError
from ...contracts.events import KernelEvent, StoredEvent
from ...contracts.ids import validate_idempotency_key, validate_thread_id, validate_turn_id
from ...contracts.receipts import (
    EffectIdentity,
    EffectReceipt,
    ReceiptStatus,
    ReconcileOutcome,
    ReconciliationRecord,
)
from ...contracts.turns import DurableTurnResult
from ...crashpoints import CrashPoint, crash_point
from .. import _turns
from .._documents import decode_model, decode_turn, encode_model, is_pruned
from .._engine import DurabilityEngine, Lease, StoredTurn, TurnCommit
from .._ledger import EffectStart, resolve_uncertain, start_effect
from .._listing import check_limit
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


class MemoryDurability(DurabilityEngine, MemoryOutboxSource, MemoryInspection):
    """In-process durability for tests. Implements every rule of the contract in one process,
    and ``OutboxSource`` for the relay."""

    def __init__(
        self,
        store: MemoryStore | None = None,
        *,
        lock_timeout: float = 30.0,
        json_limits: JsonLimits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__(lock_timeout=lock_timeout, json_limits=json_limits)
        self.store = store if store is not None else MemoryStore()

    def revoke_lease(self, thread_id: str) -> None:
        """Test helper: act as if another holder took the thread over (bumps the epoch)."""
        self.store.epochs[thread_id] = self.store.epochs.get(thread_id, 0) + 1

    # ---------------------------------------------------------------- primitives

    async def _find_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        row = self.store.turns.get((thread_id, turn_id))
        if row is None:
            return None
        result = decode_turn(row.result_json, thread_id=thread_id, turn_id=turn_id)
        return StoredTurn(result, row.fingerprint)

    @asynccontextmanager
    async def _lease(self, thread_id: str) -> AsyncIterator[Lease]:
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

    async def _load(
        self, lease: Lease, turn_id: str
    ) -> tuple[StoredTurn | None, KernelCheckpoint | None]:
        prior = await self._find_turn(lease.thread_id, turn_id)
        return prior, await self.load_checkpoint(lease.thread_id)

    async def _begin_effect(
        self, lease: Lease, turn_id: str, identity: EffectIdentity
    ) -> EffectStart:
        self._fence(lease)
        existing = await self.get_receipt(lease.thread_id, identity.idempotency_key)
        start = start_effect(
            existing, identity, thread_id=lease.thread_id, turn_id=turn_id, now=self._now()
        )
        if start.write:
            self._put_receipt(start.receipt)
        return start

    async def _finish_effect(
        self, lease: Lease, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        self._fence(lease)
        self._put_receipt(receipt)

    def _put_receipt(self, receipt: EffectReceipt) -> None:
        key = (receipt.thread_id, receipt.idempotency_key)
        self.store.receipts[key] = encode_model(receipt, limits=self.json_limits, what="receipt")

    async def _commit(self, lease: Lease, commit: TurnCommit) -> None:
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
        self.store.outbox.extend(commit.events_json)

    async def _reconcile(
        self,
        thread_id: str,
        idempotency_key: str,
        outcome: ReconcileOutcome,
        *,
        value: JsonValue,
        note: str,
        actor: str,
        lease: Lease | None,
    ) -> EffectReceipt:
        if lease is not None:
            self._fence(lease)
        existing = await self.get_receipt(thread_id, idempotency_key)
        receipt, record = resolve_uncertain(
            existing,
            outcome,
            thread_id=thread_id,
            idempotency_key=idempotency_key,
            value=value,
            note=note,
            actor=actor,
            now=self._now(),
            holds_lease=lease is not None,
        )
        self._put_receipt(receipt)
        self.store.reconciliations.append(encode_model(record, what="reconciliation"))
        return receipt

    async def _close(self) -> None:
        return None

    # ---------------------------------------------------------------- reading back

    async def load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        validate_thread_id(thread_id)
        head = self.store.heads.get(thread_id)
        if head is None:
            return None
        turn = await self._find_turn(thread_id, head[1])
        return None if turn is None else turn.result.checkpoint

    async def get_turn(self, thread_id: str, turn_id: str) -> DurableTurnResult | None:
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        turn = await self._find_turn(thread_id, turn_id)
        return None if turn is None else turn.result

    async def list_turns(
        self, thread_id: str, *, after_revision: int = 0, limit: int = 100
    ) -> list[DurableTurnResult]:
        validate_thread_id(thread_id)
        check_limit(limit)
        rows = sorted(
            (row.revision, turn_id)
            for (t, turn_id), row in self.store.turns.items()
            if t == thread_id and row.revision > after_revision and not is_pruned(row.result_json)
        )
        results = []
        for _, turn_id in rows[:limit]:
            turn = await self._find_turn(thread_id, turn_id)
            assert turn is not None
            results.append(turn.result)
        return results

    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        validate_thread_id(thread_id)
        validate_idempotency_key(idempotency_key)
        text = self.store.receipts.get((thread_id, idempotency_key))
        if text is None:
            return None
        return decode_model(EffectReceipt, text, what="receipt", thread_id=thread_id)

    async def list_receipts(
        self,
        *,
        status: ReceiptStatus | None = None,
        thread_id: str | None = None,
        limit: int = 100,
    ) -> list[EffectReceipt]:
        check_limit(limit)
        if thread_id is not None:
            validate_thread_id(thread_id)
        receipts = [
            decode_model(EffectReceipt, text, what="receipt", thread_id=t)
            for (t, _), text in self.store.receipts.items()
            if thread_id is None or t == thread_id
        ]
        if status is not None and ReceiptStatus(status) is ReceiptStatus.UNCERTAIN:
            # Also interrupted ``prepared`` receipts (no live lease holder), as stored.
            chosen = [r for r in receipts if self._awaits_operator(r)]
        else:
            chosen = [r for r in receipts if status is None or r.status is ReceiptStatus(status)]
        chosen.sort(key=lambda r: (r.updated_at, r.id))
        return chosen[:limit]

    async def reconciliations(
        self, *, thread_id: str | None = None, idempotency_key: str | None = None
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

    async def read_outbox(
        self,
        *,
        thread_id: str | None = None,
        turn_id: str | None = None,
        after_position: int = 0,
        limit: int = 1000,
    ) -> list[StoredEvent]:
        check_limit(limit, maximum=10_000)
        events: list[StoredEvent] = []
        for position, text in enumerate(self.store.outbox, start=1):
            if position <= after_position or text is None:
                continue
            event = decode_model(KernelEvent, text, what="outbox event")
            if thread_id is not None and event.thread_id != thread_id:
                continue
            if turn_id is not None and event.turn_id != turn_id:
                continue
            stored = self._stored(position, event)
            assert stored is not None
            events.append(stored)
            if len(events) >= limit:
                break
        return events
