"""``DurableStore``: the public face of every store, composed from its storage roles.

Each public method checks its arguments, then that the store is open, then makes one call to a
role (``storage.py``): ``TurnStorage`` (required), ``HistoryStorage``, ``OutboxStorage`` and
``InspectionStorage``. A role the store was built without refuses its methods with
``NOT_SUPPORTED``. The turn and effect algorithm lives in ``_scope.py``, over ``TurnStorage``
alone. So the stores cannot drift from each other (see ``docs/conformance.md``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Self, TypeVar

from pydantic import JsonValue

from ..contracts import codec
from ..contracts.checkpoint import KernelCheckpoint
from ..contracts.codec import DEFAULT_LIMITS, JsonLimits
from ..contracts.errors import ConfigurationError, ErrorCode, InvalidInputError, UsageError
from ..contracts.events import StoredEvent
from ..contracts.ids import (
    validate_id,
    validate_idempotency_key,
    validate_thread_id,
    validate_turn_id,
)
from ..contracts.inspect import LeaseInfo, PruneReport, SchemaInfo, StoreStatus, ThreadSummary
from ..contracts.outbox import OutboxStats, Partition, Partitions
from ..contracts.receipts import (
    NO_VALUE,
    EffectReceipt,
    NoValue,
    ReceiptStatus,
    ReconcileOutcome,
    ReconciliationRecord,
)
from ..contracts.turns import DurableTurnResult
from . import _arguments as check
from . import _turns
from ._documents import ENVELOPE_DEPTH, MAX_DOCUMENT_DEPTH
from ._flow import Counters
from ._flow_role import FlowStorage
from ._inbox import Inbox
from ._inbox_role import InboxStorage
from ._ledger import reconcile_takes_lease
from ._schedule_role import ScheduleStorage
from ._schedules import Schedules
from ._scope import TurnScopeImpl, open_scope
from ._writes import LedgerWrites, utc_now
from .storage import (
    HistoryStorage,
    InspectionStorage,
    LeaseT,
    OutboxStorage,
    Reconciliation,
    ThreadQuery,
    TurnStorage,
)

__all__ = ["DurableStore", "StoreRoles", "check_settings"]

T = TypeVar("T")
R = TypeVar("R")

MAX_NOTE_LENGTH = 4000


def check_settings(lock_timeout: float, json_limits: JsonLimits) -> tuple[float, JsonLimits]:
    """The settings every store takes, checked (a backend checks them before its roles)."""
    if (
        isinstance(lock_timeout, bool)
        or not isinstance(lock_timeout, int | float)
        or not 0 < lock_timeout <= 3600
    ):
        raise ConfigurationError(
            "lock_timeout must be a number of seconds in (0, 3600]",
            context={"setting": "lock_timeout"},
        )
    if not isinstance(json_limits, JsonLimits) or (
        json_limits.max_depth + ENVELOPE_DEPTH > MAX_DOCUMENT_DEPTH
    ):
        raise ConfigurationError(
            "json_limits must be JsonLimits with max_depth at most "
            f"{MAX_DOCUMENT_DEPTH - ENVELOPE_DEPTH} (a stored document wraps each value)",
            context={"setting": "json_limits"},
        )
    return float(lock_timeout), json_limits


@dataclass(frozen=True, slots=True)
class StoreRoles(Generic[LeaseT]):
    """The role objects a store is composed of (``None``: the store lacks that role)."""

    turns: TurnStorage[LeaseT]
    history: HistoryStorage[LeaseT] | None = None
    outbox: OutboxStorage | None = None
    inspection: InspectionStorage | None = None
    inbox: InboxStorage | None = None

    def need_history(self) -> HistoryStorage[LeaseT]:
        if self.history is None:
            raise _lacks("history")
        return self.history

    def need_outbox(self) -> OutboxStorage:
        if self.outbox is None:
            raise _lacks("outbox")
        return self.outbox

    def need_inspection(self) -> InspectionStorage:
        if self.inspection is None:
            raise _lacks("inspection")
        return self.inspection


def _lacks(role: str) -> UsageError:
    return UsageError(
        f"this store has no {role} storage", code=ErrorCode.NOT_SUPPORTED, context={"role": role}
    )


class DurableStore(Generic[LeaseT]):
    """A durable store: ``Durability``, ``DurabilityStore``, ``OutboxSource`` and
    ``StoreInspector`` over the role objects in ``roles`` (see ``storage.py``).

    A backend builds its roles over one connection and passes them here; a store may be built
    directly from roles too (``DurableStore(turns)`` is a store with rules 1-7 only).
    """

    def __init__(
        self,
        turns: TurnStorage[LeaseT],
        *,
        history: HistoryStorage[LeaseT] | None = None,
        outbox: OutboxStorage | None = None,
        inspection: InspectionStorage | None = None,
        inbox: InboxStorage | None = None,
        lock_timeout: float = 30.0,
        json_limits: JsonLimits = DEFAULT_LIMITS,
        clock: Callable[[], datetime] = utc_now,
        flow: FlowStorage | None = None,
        schedules: ScheduleStorage | None = None,
    ) -> None:
        self.lock_timeout, self.json_limits = check_settings(lock_timeout, json_limits)
        self.roles = StoreRoles(turns, history, outbox, inspection, inbox)
        self._closed = False
        self._inbox = (
            None
            if inbox is None
            else Inbox(
                inbox, json_limits=self.json_limits, check_open=self._check_open, clock=clock
            )
        )
        self._counters = (
            None if flow is None else Counters(flow, check_open=self._check_open, clock=clock)
        )
        self._schedules = (
            None
            if schedules is None
            else Schedules(schedules, json_limits=self.json_limits, check_open=self._check_open)
        )
        self.record_retry_seconds = 10.0
        """How long a receipt's final write is retried after transient store errors (busy,
        connection lost) before the receipt is left ``prepared`` (seen as uncertain)."""
        self._writes = LedgerWrites(
            turns,
            json_limits=self.json_limits,
            clock=clock,
            check_open=self._check_open,
            retry_seconds=lambda: self.record_retry_seconds,
        )

    # ---------------------------------------------------------------- turns

    async def with_turn(
        self,
        thread_id: str,
        turn_id: str,
        operation: Callable[[TurnScopeImpl[LeaseT]], Awaitable[T]],
        *,
        request_fingerprint: str | None = None,
    ) -> T:
        """Run ``operation(scope)`` as the durable boundary of one turn (see the contract)."""
        if not callable(operation):
            raise InvalidInputError("operation must be callable", context={"field": "operation"})
        async with self.turn(thread_id, turn_id, request_fingerprint=request_fingerprint) as scope:
            return await operation(scope)

    def turn(
        self, thread_id: str, turn_id: str, *, request_fingerprint: str | None = None
    ) -> AbstractAsyncContextManager[TurnScopeImpl[LeaseT]]:
        """The same boundary as an ``async with`` block (one code path with ``with_turn``)."""
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        fingerprint = _turns.validate_fingerprint(request_fingerprint)
        self._check_open()
        return open_scope(self._writes, thread_id, turn_id, fingerprint)

    @property
    def inbox(self) -> Inbox:
        """The store's turn inbox (``NOT_SUPPORTED`` for a store built without one)."""
        if self._inbox is None:
            raise _lacks("inbox")
        return self._inbox

    @property
    def schedules(self) -> Schedules:
        """The store's schedule rows (``NOT_SUPPORTED`` for a store built without them)."""
        if self._schedules is None:
            raise _lacks("schedules")
        return self._schedules

    @property
    def counters(self) -> Counters:
        """Budget counters and provider slots (``NOT_SUPPORTED`` for a store without them)."""
        if self._counters is None:
            raise _lacks("flow")
        return self._counters

    # ---------------------------------------------------------------- reads

    async def load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        """The thread's latest committed checkpoint (``None`` for a new thread)."""
        validate_thread_id(thread_id)
        self._check_open()
        return await self.roles.need_history().load_checkpoint(thread_id)

    async def get_turn(self, thread_id: str, turn_id: str) -> DurableTurnResult | None:
        """The committed result of a turn (``None`` if it never committed)."""
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        self._check_open()
        stored = await self.roles.turns.read_turn(thread_id, turn_id)
        return None if stored is None else stored.result

    async def list_turns(
        self, thread_id: str, *, after_revision: int = 0, limit: int = 100
    ) -> list[DurableTurnResult]:
        """Committed turns of a thread in commit order (by checkpoint revision)."""
        validate_thread_id(thread_id)
        after_revision = check.check_revision(after_revision, "after_revision")
        limit = check.check_limit(limit)
        self._check_open()
        return await self.roles.need_history().list_turns(thread_id, after_revision, limit)

    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        """The ledger's receipt for a key of the thread."""
        validate_thread_id(thread_id)
        validate_idempotency_key(idempotency_key)
        self._check_open()
        return await self.roles.turns.get_receipt(thread_id, idempotency_key)

    async def list_receipts(
        self,
        *,
        status: ReceiptStatus | None = None,
        thread_id: str | None = None,
        limit: int = 100,
    ) -> list[EffectReceipt]:
        """Receipts across threads, oldest update first (see ``DurabilityStore``)."""
        chosen = check.check_status(status)
        thread_id = check.check_optional_thread_id(thread_id)
        limit = check.check_limit(limit)
        self._check_open()
        return await self.roles.need_history().list_receipts(chosen, thread_id, limit)

    async def reconciliations(
        self, *, thread_id: str | None = None, idempotency_key: str | None = None
    ) -> list[ReconciliationRecord]:
        """The audit records of reconciliations, oldest first."""
        thread_id = check.check_optional_thread_id(thread_id)
        if idempotency_key is not None:
            validate_idempotency_key(idempotency_key)
        self._check_open()
        return await self.roles.need_history().reconciliations(thread_id, idempotency_key)

    async def read_outbox(
        self,
        *,
        thread_id: str | None = None,
        turn_id: str | None = None,
        after_position: int = 0,
        limit: int = 1000,
    ) -> list[StoredEvent]:
        """Committed outbox events in commit order (turn order, then sequence)."""
        thread_id = check.check_optional_thread_id(thread_id)
        turn_id = check.check_optional_turn_id(turn_id)
        after_position = check.check_revision(after_position, "after_position")
        limit = check.check_limit(limit, maximum=10_000)
        self._check_open()
        return await self.roles.need_history().read_outbox(
            thread_id, turn_id, after_position, limit
        )

    # ---------------------------------------------------------------- reconciliation

    async def reconcile(
        self,
        thread_id: str,
        idempotency_key: str,
        outcome: ReconcileOutcome,
        *,
        value: JsonValue | NoValue = NO_VALUE,
        note: str,
        actor: str,
        correct: bool = False,
    ) -> EffectReceipt:
        """Resolve an uncertain receipt, or correct a reconciled one (see
        ``DurabilityStore.reconcile``)."""
        validate_thread_id(thread_id)
        validate_idempotency_key(idempotency_key)
        validate_id(actor, "actor")
        if outcome not in ("completed", "not_applied"):
            raise InvalidInputError(
                "outcome must be 'completed' or 'not_applied'", context={"field": "outcome"}
            )
        if outcome == "completed" and value is NO_VALUE:
            raise InvalidInputError(
                "a completed resolution needs the provider's value (value=None records null)",
                context={"field": "value"},
            )
        if outcome == "not_applied" and value is not NO_VALUE and value is not None:
            raise InvalidInputError(
                "a not_applied resolution carries no value", context={"field": "value"}
            )
        if not isinstance(note, str) or not note.strip() or len(note) > MAX_NOTE_LENGTH:
            raise InvalidInputError(
                f"note must be non-blank text of at most {MAX_NOTE_LENGTH} characters",
                context={"field": "note"},
            )
        correct = check.check_flag(correct, "correct")
        stored = None
        if not isinstance(value, NoValue):
            stored = codec.round_trip(value, limits=self.json_limits, what="reconciled value")
        self._check_open()
        history = self.roles.need_history()
        decision = Reconciliation(
            thread_id, idempotency_key, outcome, stored, note, actor, correct=correct
        )
        if correct:  # only a completed or failed receipt can be corrected: no lease needed
            return await history.reconcile(decision, None)
        existing = await self.roles.turns.get_receipt(thread_id, idempotency_key)
        if not reconcile_takes_lease(existing):
            return await history.reconcile(decision, None)
        # A ``prepared`` receipt may belong to a running turn: hold the thread's lease (waiting
        # for that turn, fencing a paused former holder); still prepared then, it was interrupted.
        async with self.roles.turns.lease(thread_id) as lease:
            return await history.reconcile(decision, lease)

    # ---------------------------------------------------------------- outbox source

    async def claim(
        self, relay_id: str, *, limit: int, lease: float, partitions: Partitions | None = None
    ) -> list[StoredEvent]:
        """Claim up to ``limit`` deliverable events for ``lease`` seconds, of the threads in
        ``partitions`` if given (``OutboxSource``)."""
        relay_id = check.check_relay_id(relay_id)
        limit = check.check_limit(limit, maximum=10_000)
        seconds = check.check_seconds(lease, "lease")
        if partitions is not None and not isinstance(partitions, Partitions):
            raise InvalidInputError("partitions must be Partitions (from hold_partition)")
        self._check_open()
        if partitions is not None and not partitions.served:
            return []
        return await self.roles.need_outbox().claim(relay_id, limit, seconds, partitions)

    async def hold_partition(
        self, relay_id: str, partition: Partition, *, lease: float
    ) -> Partitions:
        """Take or renew the relay's lease on its partition; what it serves now."""
        relay_id = check.check_relay_id(relay_id)
        partition = _check_partition(partition)
        seconds = check.check_seconds(lease, "lease")
        self._check_open()
        return await self.roles.need_outbox().hold_partition(relay_id, partition, seconds)

    async def release_partition(self, relay_id: str, partition: Partition) -> bool:
        """Give the relay's partition lease up so the next relay serves it at once."""
        relay_id = check.check_relay_id(relay_id)
        partition = _check_partition(partition)
        self._check_open()
        return await self.roles.need_outbox().release_partition(relay_id, partition)

    async def mark_delivered(self, relay_id: str, positions: Sequence[int]) -> int:
        """Record that the sink acknowledged these events; returns how many changed state."""
        relay_id = check.check_relay_id(relay_id)
        chosen = check.check_positions(positions)
        self._check_open()
        return await self.roles.need_outbox().mark_delivered(relay_id, chosen) if chosen else 0

    async def record_failure(
        self,
        relay_id: str,
        position: int,
        *,
        error: str,
        retry_in: float,
        max_attempts: int,
        permanent: bool = False,
    ) -> StoredEvent | None:
        """Count a failed attempt and release the claim (``OutboxSource.record_failure``)."""
        relay_id = check.check_relay_id(relay_id)
        position = check.check_position(position)
        error = check.check_text(error, "error", maximum=check.MAX_ERROR_LENGTH)
        seconds = check.check_seconds(retry_in, "retry_in")
        max_attempts = check.check_limit(max_attempts, maximum=1_000_000)
        permanent = check.check_flag(permanent, "permanent")
        self._check_open()
        return await self.roles.need_outbox().record_failure(
            relay_id, position, error, seconds, max_attempts, permanent
        )

    async def release(self, relay_id: str, positions: Sequence[int]) -> int:
        """Give back claims without counting an attempt."""
        relay_id = check.check_relay_id(relay_id)
        chosen = check.check_positions(positions)
        self._check_open()
        return await self.roles.need_outbox().release(relay_id, chosen) if chosen else 0

    async def requeue(
        self, positions: Sequence[int] | None = None, *, thread_id: str | None = None
    ) -> int:
        """Make dead events pending again (all, by position, or by thread)."""
        chosen = None if positions is None else check.check_positions(positions)
        thread_id = check.check_optional_thread_id(thread_id)
        self._check_open()
        if chosen == []:
            return 0
        return await self.roles.need_outbox().requeue(chosen, thread_id)

    async def dead_letters(self, *, limit: int = 100) -> list[StoredEvent]:
        """Dead events in position order, with their attempts and reason."""
        limit = check.check_limit(limit, maximum=10_000)
        self._check_open()
        return await self.roles.need_outbox().dead_letters(limit)

    async def prune(self, older_than: float) -> int:
        """Delete events delivered more than ``older_than`` seconds ago."""
        seconds = check.check_seconds(older_than, "older_than")
        self._check_open()
        return await self.roles.need_outbox().prune(seconds)

    async def outbox_stats(self) -> OutboxStats:
        """Delivery backlog: pending, claimed, dead, delivered, oldest pending age."""
        self._check_open()
        return await self.roles.need_outbox().stats()

    # ---------------------------------------------------------------- operator queries

    async def list_threads(
        self,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
        uncertain: bool | None = None,
        pending: bool | None = None,
        corrupt: bool | None = None,
        fingerprint_not_in: Collection[str] | None = None,
    ) -> list[ThreadSummary]:
        """Threads in id order (those with commits or receipts), after the cursor ``after``,
        filtered as ``StoreInspector.list_threads`` says (filters combine with AND)."""
        if prefix is not None and not isinstance(prefix, str):
            raise InvalidInputError("prefix must be text", context={"field": "prefix"})
        if after is not None and not isinstance(after, str):
            raise InvalidInputError("after must be text", context={"field": "after"})
        query = ThreadQuery(
            prefix=prefix or None,
            after=after or None,
            limit=check.check_limit(limit),
            uncertain=check.check_optional_flag(uncertain, "uncertain"),
            pending=check.check_optional_flag(pending, "pending"),
            corrupt=check.check_optional_flag(corrupt, "corrupt"),
            fingerprint_not_in=check.check_fingerprints(fingerprint_not_in),
        )
        self._check_open()
        return await self.roles.need_inspection().list_threads(query)

    async def store_status(self) -> StoreStatus:
        """Schema version and counts of threads, turns, open receipts and events."""
        self._check_open()
        return await self.roles.need_inspection().status()

    async def schema_info(self) -> SchemaInfo:
        """The store's schema version against what this code writes."""
        self._check_open()
        return await self.roles.need_inspection().schema_info()

    async def lease_info(self, thread_id: str) -> LeaseInfo:
        """Probe the lease without waiting for it and without disturbing a holder."""
        validate_thread_id(thread_id)
        self._check_open()
        return await self.roles.need_inspection().lease_info(thread_id)

    async def prune_records(self, *, older_than: datetime, dry_run: bool = False) -> PruneReport:
        """Remove turn records and delivered events older than ``older_than``, keeping every
        live obligation (see ``contracts.inspect``)."""
        older_than = check.check_cutoff(older_than)
        dry_run = check.check_flag(dry_run, "dry_run")
        self._check_open()
        return await self.roles.need_inspection().prune_records(older_than, dry_run)

    # ---------------------------------------------------------------- lifetime

    async def close(self) -> None:
        """Release the store's resources; later calls raise ``SCOPE_CLOSED``. Idempotent."""
        if not self._closed:
            self._closed = True
            await self.roles.turns.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the store is closed", code=ErrorCode.SCOPE_CLOSED)


def _check_partition(partition: object) -> Partition:
    if not isinstance(partition, Partition):
        raise InvalidInputError("partition must be a Partition, e.g. Partition.parse('0/3')")
    return partition
