"""The adapter contract: the data a store's storage hands the facade, and its four roles.

A store is one ``DurableStore`` (``store.py``) over small role objects, each the storage side
of a contract that already exists. Only ``TurnStorage`` is required: it is everything rules 1-7
need. The other roles are optional; a store without one refuses that part of its public face
with ``NOT_SUPPORTED``.

Every member runs after the facade validated the arguments and checked that the store is open.
A member that has started a write must finish it (or prove it never started) before a
cancellation leaves it; the facade and the turn scope settle their own writes the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from pydantic import JsonValue

from ..contracts.checkpoint import KernelCheckpoint
from ..contracts.events import KernelEvent, StoredEvent
from ..contracts.inspect import LeaseInfo, PruneReport, SchemaInfo, StoreStatus, ThreadSummary
from ..contracts.outbox import OutboxStats, Partition, Partitions
from ..contracts.receipts import (
    EffectIdentity,
    EffectReceipt,
    ReceiptStatus,
    ReconcileOutcome,
    ReconciliationRecord,
)
from ..contracts.turns import DurableTurnResult
from ._ledger import EffectStart

__all__ = [
    "HistoryStorage",
    "InspectionStorage",
    "Lease",
    "LeaseT",
    "OpenedTurn",
    "OutboxStorage",
    "Reconciliation",
    "StoredTurn",
    "ThreadQuery",
    "TurnCommit",
    "TurnStorage",
]


@dataclass(slots=True)
class Lease:
    """Proof of holding a thread: ``epoch`` is the fencing token every write checks."""

    thread_id: str
    epoch: int


LeaseT = TypeVar("LeaseT", bound=Lease)
LeaseT_contra = TypeVar("LeaseT_contra", bound=Lease, contravariant=True)


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """A committed turn as stored: its result and the request fingerprint it was run with."""

    result: DurableTurnResult
    fingerprint: str | None


@dataclass(frozen=True, slots=True)
class OpenedTurn(Generic[LeaseT]):
    """What ``TurnStorage.open_turn`` found: a committed turn to replay (``prior``; the lease
    may or may not be held), or the held ``lease`` with the thread's latest ``checkpoint``."""

    prior: StoredTurn | None
    lease: LeaseT | None
    checkpoint: KernelCheckpoint | None = None


@dataclass(frozen=True, slots=True)
class TurnCommit:
    """Everything one turn commit writes, already validated and encoded by the turn scope."""

    result: DurableTurnResult
    result_json: str
    events: list[KernelEvent]
    events_json: list[str]
    fingerprint: str | None
    loaded_revision: int
    progress: Sequence[str] = ()
    """Progress items appended to the turn's log by the commit (stores with an inbox)."""

    @property
    def thread_id(self) -> str:
        return self.result.thread_id

    @property
    def turn_id(self) -> str:
        return self.result.turn_id

    @property
    def revision(self) -> int:
        return self.result.checkpoint.revision

    @property
    def pending_interaction(self) -> str | None:
        """Kept on the head row so listings filter on it without decoding the checkpoint."""
        interaction = self.result.checkpoint.interaction
        return None if interaction is None else interaction.kind

    @property
    def agent_fingerprint(self) -> str:
        """Kept on the head row for the ``fingerprint_not_in`` filter (same reason)."""
        return self.result.checkpoint.agent_fingerprint


@dataclass(frozen=True, slots=True)
class ThreadQuery:
    """The checked arguments of ``list_threads``; ``None`` filters nothing."""

    prefix: str | None
    after: str | None
    limit: int
    uncertain: bool | None = None
    pending: bool | None = None
    corrupt: bool | None = None
    fingerprint_not_in: frozenset[str] | None = None

    def keeps(self, summary: ThreadSummary, *, fingerprint: str | None, has_head: bool) -> bool:
        """The filters applied to one thread, ``fingerprint`` being its head's committed one.

        The reference rule: the memory store applies it as is, the SQL stores translate it.
        """
        if self.uncertain is not None and (summary.uncertain_receipts > 0) != self.uncertain:
            return False
        if self.pending is not None and (summary.pending_interaction is not None) != self.pending:
            return False
        if self.corrupt is not None and (summary.corrupt is not None) != self.corrupt:
            return False
        if self.fingerprint_not_in is not None:
            return has_head and fingerprint not in self.fingerprint_not_in
        return True


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """An operator's validated decision about one receipt (``DurabilityStore.reconcile``);
    ``correct`` replaces an earlier reconciliation (``_ledger.correct_reconciled``)."""

    thread_id: str
    idempotency_key: str
    outcome: ReconcileOutcome
    value: JsonValue
    note: str
    actor: str
    correct: bool = False


class TurnStorage(Protocol[LeaseT]):
    """The storage side of ``Durability`` and ``TurnScope``: leases, the ledger, commits.

    Required: these eight members are all a store needs to pass rules 1-7.
    """

    def open_turn(
        self, thread_id: str, turn_id: str
    ) -> AbstractAsyncContextManager[OpenedTurn[LeaseT]]:
        """Open a turn: a committed ``(thread_id, turn_id)`` is returned as ``prior`` (read
        without the lease where the store can); otherwise hold the thread's lease for the
        block (waiting at most the store's lock timeout, then ``LOCK_TIMEOUT``) and return it
        with the latest checkpoint - and ``prior`` if the turn committed meanwhile."""
        ...

    def lease(self, thread_id: str) -> AbstractAsyncContextManager[LeaseT]:
        """Hold the thread's lease for the block (used to reconcile a ``prepared`` receipt)."""
        ...

    async def begin_effect(
        self, lease: LeaseT, turn_id: str, identity: EffectIdentity, now: datetime
    ) -> EffectStart:
        """One fenced transaction: read the receipt, apply ``_ledger.start_effect`` with
        ``now`` (the same on a retry, so it finds its own ``prepared``), write
        ``start.receipt`` when ``start.write``, commit durably."""
        ...

    async def finish_effect(
        self, lease: LeaseT, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        """One fenced, durable write of the receipt's final state (from ``prepared``)."""
        ...

    async def commit(self, lease: LeaseT, commit: TurnCommit) -> None:
        """One fenced, durable transaction: turn row (unique), head revision compare-and-set
        from ``loaded_revision``, outbox rows. Calls ``crash_point(INSIDE_COMMIT)`` before
        committing."""
        ...

    async def read_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        """The committed turn, or ``None`` (``CHECKPOINT_CORRUPT`` for an unreadable row)."""
        ...

    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        """The ledger's receipt for a key of the thread, as stored."""
        ...

    async def close(self) -> None:
        """Release the resources of the connection the roles share (called once)."""
        ...


class HistoryStorage(Protocol[LeaseT_contra]):
    """The reads of ``DurabilityStore`` and its ``reconcile``: what operators look back on."""

    async def load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        """The thread's latest committed checkpoint (``None`` for a new thread)."""
        ...

    async def list_turns(
        self, thread_id: str, after_revision: int, limit: int
    ) -> list[DurableTurnResult]:
        """Committed turns after ``after_revision`` in revision order, at most ``limit``."""
        ...

    async def list_receipts(
        self, status: ReceiptStatus | None, thread_id: str | None, limit: int
    ) -> list[EffectReceipt]:
        """Oldest update first. ``UNCERTAIN`` also lists interrupted ``prepared`` receipts (no
        live lease holder, ``_ledger.needs_operator``), as stored."""
        ...

    async def reconcile(
        self, decision: Reconciliation, lease: LeaseT_contra | None
    ) -> EffectReceipt:
        """One durable transaction: read the receipt (and, when ``decision.correct``, the
        key's latest reconciliation record), apply ``_ledger.resolve_uncertain``
        (``holds_lease=lease is not None``), write the receipt and the audit record. With a
        ``lease`` (from ``TurnStorage.lease``), the transaction is fenced by it."""
        ...

    async def reconciliations(
        self, thread_id: str | None, idempotency_key: str | None
    ) -> list[ReconciliationRecord]:
        """The audit records, oldest first, filtered by the arguments that are not ``None``."""
        ...

    async def read_outbox(
        self, thread_id: str | None, turn_id: str | None, after_position: int, limit: int
    ) -> list[StoredEvent]:
        """Committed outbox events after ``after_position`` in position order."""
        ...


class OutboxStorage(Protocol):
    """The storage side of ``OutboxSource``: claims and delivery state of outbox events."""

    async def claim(
        self, relay_id: str, limit: int, lease: float, partitions: Partitions | None
    ) -> list[StoredEvent]:
        """``_outbox_rules.claimable`` over the undelivered events (of the threads in
        ``partitions``), claimed in one transaction; returned in position order."""
        ...

    async def hold_partition(self, relay_id: str, partition: Partition, lease: float) -> Partitions:
        """Take or renew the partition's lease (``_outbox_rules.may_hold_partition``) and read
        the other live ones, in one transaction; ``served_partitions`` of the two."""
        ...

    async def release_partition(self, relay_id: str, partition: Partition) -> bool:
        """End ``relay_id``'s lease on the partition now; whether it held it."""
        ...

    async def mark_delivered(self, relay_id: str, positions: list[int]) -> int:
        """Mark these (non-empty) positions delivered; how many changed state."""
        ...

    async def record_failure(
        self,
        relay_id: str,
        position: int,
        error: str,
        retry_in: float,
        max_attempts: int,
        permanent: bool,
    ) -> StoredEvent | None:
        """``_outbox_rules.failed_attempt`` while ``relay_id`` holds the claim, else ``None``."""
        ...

    async def release(self, relay_id: str, positions: list[int]) -> int:
        """Give back the claims ``relay_id`` holds on these positions; how many."""
        ...

    async def requeue(self, positions: list[int] | None, thread_id: str | None) -> int:
        """Make dead events pending again (all, by position, or by thread); how many."""
        ...

    async def dead_letters(self, limit: int) -> list[StoredEvent]:
        """Dead events in position order."""
        ...

    async def prune(self, older_than: float) -> int:
        """Delete events delivered more than ``older_than`` seconds ago; how many."""
        ...

    async def stats(self) -> OutboxStats:
        """The delivery backlog."""
        ...


class InspectionStorage(Protocol):
    """The storage side of ``StoreInspector``: operator queries and record pruning."""

    async def list_threads(self, query: ThreadQuery) -> list[ThreadSummary]:
        """At most ``query.limit`` threads after ``query.after`` in id order, kept by
        ``ThreadQuery.keeps``."""
        ...

    async def status(self) -> StoreStatus:
        """Schema version and counts of threads, turns, open receipts and events."""
        ...

    async def schema_info(self) -> SchemaInfo:
        """The stored schema version against what this code writes."""
        ...

    async def lease_info(self, thread_id: str) -> LeaseInfo:
        """Probe the lease without waiting for it and without disturbing a holder."""
        ...

    async def prune_records(self, older_than: datetime, dry_run: bool) -> PruneReport:
        """Remove turn records and delivered events older than ``older_than``, keeping every
        live obligation (see ``contracts.inspect``)."""
        ...
