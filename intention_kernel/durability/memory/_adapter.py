"""``MemoryDurability``: the full durability contract in one process. **Test-only.**

State lives in this process and is lost with it; use it for application tests, evaluations and
examples, never in production. It stores JSON text, so every value it hands out is a fresh copy.
``MemoryStore`` can be shared by several ``MemoryDurability`` instances to model a restart.
Its roles (``MemoryTurns``, ``MemoryHistory``, ``MemoryOutbox``, ``MemoryInspection``) each
work on that one ``MemoryStore``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime

from ..._crashpoints import CrashPoint, crash_point
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
from .. import _turns
from .._documents import (
    decode_model,
    encode_model,
    is_pruned,
    unreadable,
    unreadable_receipt,
)
from .._ledger import EffectStart, resolve_uncertain, start_effect
from .._writes import utc_now
from ..storage import Lease, OpenedTurn, Reconciliation, StoredTurn, TurnCommit
from ..store import DurableStore, check_settings
from ._flow import MemoryFlow
from ._inbox import MemoryInbox, mark_done
from ._inspect import MemoryInspection
from ._outbox import MemoryOutbox
from ._schedules import MemorySchedules
from ._state import Delivery, MemoryStore, TurnRow

__all__ = ["MemoryDurability", "MemoryHistory", "MemoryStore", "MemoryTurns"]


class MemoryTurns:
    """``TurnStorage`` over a ``MemoryStore``: the thread's ``asyncio.Lock`` is the lease."""

    def __init__(
        self,
        state: MemoryStore,
        *,
        lock_timeout: float = 30.0,
        json_limits: JsonLimits = DEFAULT_LIMITS,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.state = state
        self.lock_timeout = lock_timeout
        self.json_limits = json_limits
        self.clock = clock

    @asynccontextmanager
    async def open_turn(self, thread_id: str, turn_id: str) -> AsyncIterator[OpenedTurn[Lease]]:
        prior = self.state.read_turn(thread_id, turn_id)
        if prior is not None:
            yield OpenedTurn(prior, None)
            return
        async with self.lease(thread_id) as lease:
            prior = self.state.read_turn(thread_id, turn_id)
            yield OpenedTurn(prior, lease, self.state.head(thread_id))

    @asynccontextmanager
    async def lease(self, thread_id: str) -> AsyncIterator[Lease]:
        lock = self.state.locks.setdefault(thread_id, asyncio.Lock())
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
            epoch = self.state.epochs.get(thread_id, 0) + 1
            self.state.epochs[thread_id] = epoch
            yield Lease(thread_id, epoch)
        finally:
            lock.release()

    async def begin_effect(
        self, lease: Lease, turn_id: str, identity: EffectIdentity, now: datetime
    ) -> EffectStart:
        fence(self.state, lease)
        existing = self.state.receipt(lease.thread_id, identity.idempotency_key)
        start = start_effect(
            existing, identity, thread_id=lease.thread_id, turn_id=turn_id, now=now
        )
        if start.write:
            self.state.put_receipt(start.receipt, self.json_limits)
        return start

    async def finish_effect(
        self, lease: Lease, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        fence(self.state, lease)
        self.state.put_receipt(receipt, self.json_limits)

    async def commit(self, lease: Lease, commit: TurnCommit) -> None:
        thread_id, turn_id = commit.thread_id, commit.turn_id
        fence(self.state, lease)
        if (thread_id, turn_id) in self.state.turns:
            raise _turns.already_committed(thread_id, turn_id)
        stored_revision = self.state.heads.get(thread_id, (0, ""))[0]
        _turns.check_revision(commit.loaded_revision, stored_revision, thread_id=thread_id)
        crash_point(CrashPoint.INSIDE_COMMIT, thread_id=thread_id, turn_id=turn_id)
        # Everything above can fail; nothing below can, so the commit is all or nothing.
        revision = commit.revision
        self.state.turns[(thread_id, turn_id)] = TurnRow(
            commit.fingerprint, commit.result_json, revision
        )
        self.state.committed_at[(thread_id, turn_id)] = self.clock()
        self.state.heads[thread_id] = (revision, turn_id)
        self.state.head_facts[thread_id] = (commit.agent_fingerprint, commit.pending_interaction)
        mark_done(self.state, thread_id, turn_id, self.clock(), commit.progress)
        for event, text in zip(commit.events, commit.events_json, strict=True):
            self.state.outbox.append(text)
            self.state.deliveries[len(self.state.outbox)] = Delivery(
                event.thread_id, event.occurred_at, revision
            )

    async def read_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        return self.state.read_turn(thread_id, turn_id)

    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        return self.state.receipt(thread_id, idempotency_key)

    async def close(self) -> None:
        return None


def fence(state: MemoryStore, lease: Lease) -> None:
    """Refuse a write whose lease epoch is no longer the thread's (``LeaseLostError``)."""
    current = state.epochs.get(lease.thread_id, 0)
    if current != lease.epoch:
        raise LeaseLostError(
            context={"thread_id": lease.thread_id, "epoch": lease.epoch, "current": current}
        )


class MemoryHistory:
    """``HistoryStorage`` over a ``MemoryStore``."""

    def __init__(
        self,
        state: MemoryStore,
        *,
        json_limits: JsonLimits = DEFAULT_LIMITS,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.state = state
        self.json_limits = json_limits
        self.clock = clock

    async def reconcile(self, decision: Reconciliation, lease: Lease | None) -> EffectReceipt:
        if lease is not None:
            fence(self.state, lease)
        existing = self.state.receipt(decision.thread_id, decision.idempotency_key)
        last = self._last_reconciliation(decision) if decision.correct else None
        receipt, record = resolve_uncertain(
            existing,
            decision.outcome,
            thread_id=decision.thread_id,
            idempotency_key=decision.idempotency_key,
            value=decision.value,
            note=decision.note,
            actor=decision.actor,
            now=self.clock(),
            holds_lease=lease is not None,
            correct=decision.correct,
            last=last,
        )
        self.state.put_receipt(receipt, self.json_limits)
        self.state.reconciliations.append(encode_model(record, what="reconciliation"))
        return receipt

    def _last_reconciliation(self, decision: Reconciliation) -> ReconciliationRecord | None:
        for text in reversed(self.state.reconciliations):
            record = decode_model(ReconciliationRecord, text, what="reconciliation")
            if (record.thread_id, record.idempotency_key) == (
                decision.thread_id,
                decision.idempotency_key,
            ):
                return record
        return None

    async def load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        return self.state.head(thread_id)

    async def list_turns(
        self, thread_id: str, after_revision: int, limit: int
    ) -> list[DurableTurnResult]:
        rows = sorted(
            (row.revision, turn_id)
            for (t, turn_id), row in self.state.turns.items()
            if t == thread_id and row.revision > after_revision and not is_pruned(row.result_json)
        )
        results = []
        for _, turn_id in rows[:limit]:
            turn = self.state.read_turn(thread_id, turn_id)
            assert turn is not None
            results.append(turn.result)
        return results

    async def list_receipts(
        self, status: ReceiptStatus | None, thread_id: str | None, limit: int
    ) -> list[EffectReceipt]:
        receipts = [
            self._listed_receipt(t, key, text)
            for (t, key), text in self.state.receipts.items()
            if thread_id is None or t == thread_id
        ]
        if status is ReceiptStatus.UNCERTAIN:
            # Also interrupted ``prepared`` receipts (no live lease holder), as stored.
            chosen = [r for r in receipts if self.state.awaits_operator(r)]
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

    async def reconciliations(
        self, thread_id: str | None, idempotency_key: str | None
    ) -> list[ReconciliationRecord]:
        records = [
            decode_model(ReconciliationRecord, text, what="reconciliation")
            for text in self.state.reconciliations
        ]
        return [
            r
            for r in records
            if (thread_id is None or r.thread_id == thread_id)
            and (idempotency_key is None or r.idempotency_key == idempotency_key)
        ]

    async def read_outbox(
        self, thread_id: str | None, turn_id: str | None, after_position: int, limit: int
    ) -> list[StoredEvent]:
        events: list[StoredEvent] = []
        for position, text in enumerate(self.state.outbox, start=1):
            if position <= after_position or text is None:
                continue
            stored = self.state.stored_event(position)
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


class MemoryDurability(DurableStore[Lease]):
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
        lock_timeout, json_limits = check_settings(lock_timeout, json_limits)
        self.store = store if store is not None else MemoryStore()
        state = self.store
        super().__init__(
            MemoryTurns(state, lock_timeout=lock_timeout, json_limits=json_limits),
            history=MemoryHistory(state, json_limits=json_limits),
            outbox=MemoryOutbox(state),
            inspection=MemoryInspection(state),
            inbox=MemoryInbox(state),
            flow=MemoryFlow(state.flow),
            schedules=MemorySchedules(state.schedules, state.timers),
            lock_timeout=lock_timeout,
            json_limits=json_limits,
        )
