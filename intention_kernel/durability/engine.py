"""Deprecated: ``DurabilityEngine``, a store written as ``storage_*`` hooks (one release).

The store is now ``DurableStore`` (``store.py``) over role objects (``storage.py``); the turn
scope is ``_scope.py``. This module keeps the old hook base class working on top of them, and
the old import path of the data types.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import Any, Generic

from ..contracts.checkpoint import KernelCheckpoint
from ..contracts.codec import DEFAULT_LIMITS, JsonLimits
from ..contracts.events import StoredEvent
from ..contracts.inspect import LeaseInfo, PruneReport, SchemaInfo, StoreStatus, ThreadSummary
from ..contracts.outbox import OutboxStats
from ..contracts.receipts import (
    EffectIdentity,
    EffectReceipt,
    ReceiptStatus,
    ReconciliationRecord,
)
from ..contracts.turns import DurableTurnResult
from ._ledger import EffectStart
from ._scope import TurnScopeImpl
from .storage import (
    Lease,
    LeaseT,
    OpenedTurn,
    Reconciliation,
    StoredTurn,
    ThreadQuery,
    TurnCommit,
)
from .store import DurableStore

__all__ = [
    "DurabilityEngine",
    "Lease",
    "OpenedTurn",
    "Reconciliation",
    "StoredTurn",
    "ThreadQuery",
    "TurnCommit",
    "TurnScopeImpl",
]


class DurabilityEngine(DurableStore[LeaseT], ABC):
    """Deprecated: a store written as one class of ``storage_*`` hooks (kept for one release).

    New stores build role objects (``storage.py``) and pass them to ``DurableStore``. This
    base class adapts its subclass's hooks to those roles, so the public face and the turn
    algorithm are the same ``DurableStore`` and ``_scope`` code as every other store.
    """

    def __init__(
        self, *, lock_timeout: float = 30.0, json_limits: JsonLimits = DEFAULT_LIMITS
    ) -> None:
        super().__init__(
            _HookTurns(self),
            history=_HookHistory(self),
            outbox=_HookOutbox(self),
            inspection=_HookInspection(self),
            lock_timeout=lock_timeout,
            json_limits=json_limits,
            clock=self._now,
        )

    # ---------------------------------------------------------------- storage hooks: turns

    @abstractmethod
    def storage_open_turn(
        self, thread_id: str, turn_id: str
    ) -> AbstractAsyncContextManager[OpenedTurn[LeaseT]]:
        """Open a turn: a committed ``(thread_id, turn_id)`` is returned as ``prior`` (read
        without the lease where the store can); otherwise hold the thread's lease for the
        block (waiting at most ``self.lock_timeout``, then ``LOCK_TIMEOUT``) and return it
        with the latest checkpoint - and ``prior`` if the turn committed meanwhile."""

    @abstractmethod
    def storage_lease(self, thread_id: str) -> AbstractAsyncContextManager[LeaseT]:
        """Hold the thread's lease for the block (used to reconcile a ``prepared`` receipt)."""

    @abstractmethod
    async def storage_begin_effect(
        self, lease: LeaseT, turn_id: str, identity: EffectIdentity, now: datetime
    ) -> EffectStart:
        """One fenced transaction: read the receipt, apply ``_ledger.start_effect`` with
        ``now`` (the same on a retry, so it finds its own ``prepared``), write
        ``start.receipt`` when ``start.write``, commit durably."""

    @abstractmethod
    async def storage_finish_effect(
        self, lease: LeaseT, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        """One fenced, durable write of the receipt's final state (from ``prepared``)."""

    @abstractmethod
    async def storage_commit(self, lease: LeaseT, commit: TurnCommit) -> None:
        """One fenced, durable transaction: turn row (unique), head revision compare-and-set
        from ``loaded_revision``, outbox rows. Calls ``crash_point(INSIDE_COMMIT)`` before
        committing."""

    @abstractmethod
    async def storage_reconcile(
        self, decision: Reconciliation, lease: LeaseT | None
    ) -> EffectReceipt:
        """One durable transaction: read the receipt (and, when ``decision.correct``, the
        key's latest reconciliation record), apply ``_ledger.resolve_uncertain``
        (``holds_lease=lease is not None``), write the receipt and the audit record. With a
        ``lease``, the transaction is fenced by it like a turn's write."""

    @abstractmethod
    async def storage_close(self) -> None:
        """Release the store's resources (called once)."""

    # ---------------------------------------------------------------- storage hooks: reads

    @abstractmethod
    async def storage_read_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None: ...

    @abstractmethod
    async def storage_load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None: ...

    @abstractmethod
    async def storage_list_turns(
        self, thread_id: str, after_revision: int, limit: int
    ) -> list[DurableTurnResult]: ...

    @abstractmethod
    async def storage_get_receipt(
        self, thread_id: str, idempotency_key: str
    ) -> EffectReceipt | None: ...

    @abstractmethod
    async def storage_list_receipts(
        self, status: ReceiptStatus | None, thread_id: str | None, limit: int
    ) -> list[EffectReceipt]:
        """``UNCERTAIN`` also lists interrupted ``prepared`` receipts (no live lease holder,
        ``_ledger.needs_operator``), as stored."""

    @abstractmethod
    async def storage_reconciliations(
        self, thread_id: str | None, idempotency_key: str | None
    ) -> list[ReconciliationRecord]: ...

    @abstractmethod
    async def storage_read_outbox(
        self, thread_id: str | None, turn_id: str | None, after_position: int, limit: int
    ) -> list[StoredEvent]: ...

    # ---------------------------------------------------------------- storage hooks: outbox

    @abstractmethod
    async def storage_claim(self, relay_id: str, limit: int, lease: float) -> list[StoredEvent]:
        """``_outbox_rules.claimable`` over the undelivered events, claimed in one transaction;
        returned in position order."""

    @abstractmethod
    async def storage_mark_delivered(self, relay_id: str, positions: list[int]) -> int: ...

    @abstractmethod
    async def storage_record_failure(
        self,
        relay_id: str,
        position: int,
        error: str,
        retry_in: float,
        max_attempts: int,
        permanent: bool,
    ) -> StoredEvent | None:
        """``_outbox_rules.failed_attempt`` while ``relay_id`` holds the claim, else ``None``."""

    @abstractmethod
    async def storage_release(self, relay_id: str, positions: list[int]) -> int: ...

    @abstractmethod
    async def storage_requeue(self, positions: list[int] | None, thread_id: str | None) -> int: ...

    @abstractmethod
    async def storage_dead_letters(self, limit: int) -> list[StoredEvent]: ...

    @abstractmethod
    async def storage_prune_outbox(self, older_than: float) -> int: ...

    @abstractmethod
    async def storage_outbox_stats(self) -> OutboxStats: ...

    # ---------------------------------------------------------------- storage hooks: operators

    @abstractmethod
    async def storage_list_threads(self, query: ThreadQuery) -> list[ThreadSummary]:
        """At most ``query.limit`` threads after ``query.after`` in id order, kept by
        ``ThreadQuery.keeps``."""

    @abstractmethod
    async def storage_status(self) -> StoreStatus: ...

    @abstractmethod
    async def storage_schema_info(self) -> SchemaInfo: ...

    @abstractmethod
    async def storage_lease_info(self, thread_id: str) -> LeaseInfo: ...

    @abstractmethod
    async def storage_prune_records(self, older_than: datetime, dry_run: bool) -> PruneReport: ...

    def _now(self) -> datetime:
        return datetime.now(UTC)


class _HookTurns(Generic[LeaseT]):
    """``TurnStorage`` over a ``DurabilityEngine``'s hooks."""

    def __init__(self, host: DurabilityEngine[LeaseT]) -> None:
        self.host = host

    def open_turn(
        self, thread_id: str, turn_id: str
    ) -> AbstractAsyncContextManager[OpenedTurn[LeaseT]]:
        return self.host.storage_open_turn(thread_id, turn_id)

    def lease(self, thread_id: str) -> AbstractAsyncContextManager[LeaseT]:
        return self.host.storage_lease(thread_id)

    async def begin_effect(
        self, lease: LeaseT, turn_id: str, identity: EffectIdentity, now: datetime
    ) -> EffectStart:
        return await self.host.storage_begin_effect(lease, turn_id, identity, now)

    async def finish_effect(
        self, lease: LeaseT, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        await self.host.storage_finish_effect(lease, receipt, value_json)

    async def commit(self, lease: LeaseT, commit: TurnCommit) -> None:
        await self.host.storage_commit(lease, commit)

    async def read_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        return await self.host.storage_read_turn(thread_id, turn_id)

    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        return await self.host.storage_get_receipt(thread_id, idempotency_key)

    async def close(self) -> None:
        await self.host.storage_close()


class _HookHistory(Generic[LeaseT]):
    """``HistoryStorage`` over a ``DurabilityEngine``'s hooks."""

    def __init__(self, host: DurabilityEngine[LeaseT]) -> None:
        self.host = host

    async def load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        return await self.host.storage_load_checkpoint(thread_id)

    async def list_turns(
        self, thread_id: str, after_revision: int, limit: int
    ) -> list[DurableTurnResult]:
        return await self.host.storage_list_turns(thread_id, after_revision, limit)

    async def list_receipts(
        self, status: ReceiptStatus | None, thread_id: str | None, limit: int
    ) -> list[EffectReceipt]:
        return await self.host.storage_list_receipts(status, thread_id, limit)

    async def reconcile(self, decision: Reconciliation, lease: LeaseT | None) -> EffectReceipt:
        return await self.host.storage_reconcile(decision, lease)

    async def reconciliations(
        self, thread_id: str | None, idempotency_key: str | None
    ) -> list[ReconciliationRecord]:
        return await self.host.storage_reconciliations(thread_id, idempotency_key)

    async def read_outbox(
        self, thread_id: str | None, turn_id: str | None, after_position: int, limit: int
    ) -> list[StoredEvent]:
        return await self.host.storage_read_outbox(thread_id, turn_id, after_position, limit)


class _HookOutbox:
    """``OutboxStorage`` over a ``DurabilityEngine``'s hooks."""

    def __init__(self, host: DurabilityEngine[Any]) -> None:
        self.host = host

    async def claim(self, relay_id: str, limit: int, lease: float) -> list[StoredEvent]:
        return await self.host.storage_claim(relay_id, limit, lease)

    async def mark_delivered(self, relay_id: str, positions: list[int]) -> int:
        return await self.host.storage_mark_delivered(relay_id, positions)

    async def record_failure(
        self,
        relay_id: str,
        position: int,
        error: str,
        retry_in: float,
        max_attempts: int,
        permanent: bool,
    ) -> StoredEvent | None:
        return await self.host.storage_record_failure(
            relay_id, position, error, retry_in, max_attempts, permanent
        )

    async def release(self, relay_id: str, positions: list[int]) -> int:
        return await self.host.storage_release(relay_id, positions)

    async def requeue(self, positions: list[int] | None, thread_id: str | None) -> int:
        return await self.host.storage_requeue(positions, thread_id)

    async def dead_letters(self, limit: int) -> list[StoredEvent]:
        return await self.host.storage_dead_letters(limit)

    async def prune(self, older_than: float) -> int:
        return await self.host.storage_prune_outbox(older_than)

    async def stats(self) -> OutboxStats:
        return await self.host.storage_outbox_stats()


class _HookInspection:
    """``InspectionStorage`` over a ``DurabilityEngine``'s hooks."""

    def __init__(self, host: DurabilityEngine[Any]) -> None:
        self.host = host

    async def list_threads(self, query: ThreadQuery) -> list[ThreadSummary]:
        return await self.host.storage_list_threads(query)

    async def status(self) -> StoreStatus:
        return await self.host.storage_status()

    async def schema_info(self) -> SchemaInfo:
        return await self.host.storage_schema_info()

    async def lease_info(self, thread_id: str) -> LeaseInfo:
        return await self.host.storage_lease_info(thread_id)

    async def prune_records(self, older_than: datetime, dry_run: bool) -> PruneReport:
        return await self.host.storage_prune_records(older_than, dry_run)
