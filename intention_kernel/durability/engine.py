"""The durability engine: every public method of a store, written once for every adapter.

``DurabilityEngine`` owns the turn and effect algorithm (``with_turn``, ``TurnScope.run_effect``,
``commit``: ordering, crash points, exception classification, nesting and closed-scope guards)
and every other public method of a store - reads, receipts, reconciliation, the outbox source
and the operator queries. Each public method checks its arguments, then that the store is open,
then calls one ``storage_*`` hook. An adapter subclasses it and implements only those hooks:
short, fenced transactions that store what the pure rules (``_ledger``, ``_outbox_rules``)
decided. So the stores cannot drift from each other (see ``docs/conformance.md``).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from pydantic import JsonValue

from ..contracts import codec
from ..contracts.checkpoint import KernelCheckpoint
from ..contracts.codec import DEFAULT_LIMITS, JsonLimits
from ..contracts.errors import (
    ConfigurationError,
    DurabilityError,
    EffectNotAppliedError,
    ErrorCode,
    InvalidInputError,
    KernelError,
    LeaseLostError,
    SerializationError,
    TurnConflictError,
    UsageError,
)
from ..contracts.events import KernelEvent, StoredEvent
from ..contracts.ids import (
    validate_id,
    validate_idempotency_key,
    validate_thread_id,
    validate_turn_id,
)
from ..contracts.inspect import LeaseInfo, PruneReport, SchemaInfo, StoreStatus, ThreadSummary
from ..contracts.outbox import OutboxStats
from ..contracts.receipts import (
    NO_VALUE,
    EffectAuthority,
    EffectExecution,
    EffectIdentity,
    EffectReceipt,
    NoValue,
    ReceiptStatus,
    ReconcileOutcome,
    ReconciliationRecord,
)
from ..contracts.turns import DurableTurnResult
from ..crashpoints import CrashPoint, SimulatedCrash, crash_point
from . import _arguments as check
from . import _turns
from ._documents import ENVELOPE_DEPTH, MAX_DOCUMENT_DEPTH, encode_model
from ._ledger import (
    EffectAction,
    EffectStart,
    finish_receipt,
    own_prepared,
    reconcile_takes_lease,
    uncertain_error,
)
from ._settle import settle

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

T = TypeVar("T")

_IN_EFFECT: contextvars.ContextVar[bool] = contextvars.ContextVar("ik_in_effect", default=False)
MAX_NOTE_LENGTH = 4000
NOT_CALLED = "cancelled before the provider was called"
UNRECORDED = "the outcome could not be recorded"
NESTED = "refused: the operation called run_effect (nested effects are a programming error)"


@dataclass(slots=True)
class Lease:
    """Proof of holding a thread: ``epoch`` is the fencing token every write checks."""

    thread_id: str
    epoch: int


LeaseT = TypeVar("LeaseT", bound=Lease)


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """A committed turn as stored: its result and the request fingerprint it was run with."""

    result: DurableTurnResult
    fingerprint: str | None


@dataclass(frozen=True, slots=True)
class OpenedTurn(Generic[LeaseT]):
    """What ``storage_open_turn`` found: a committed turn to replay (``prior``; the lease may
    or may not be held), or the held ``lease`` with the thread's latest ``checkpoint``."""

    prior: StoredTurn | None
    lease: LeaseT | None
    checkpoint: KernelCheckpoint | None = None


@dataclass(frozen=True, slots=True)
class TurnCommit:
    """Everything one turn commit writes, already validated and encoded by the engine."""

    result: DurableTurnResult
    result_json: str
    events: list[KernelEvent]
    events_json: list[str]
    fingerprint: str | None
    loaded_revision: int

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


class DurabilityEngine(ABC, Generic[LeaseT]):
    """Base class of the stores: the public face, over ``storage_*`` hooks an adapter writes.

    Every hook runs after the engine validated the arguments and checked that the store is
    open. A hook that has started a write must finish it (or prove it never started) before
    a cancellation leaves it; the engine settles its own writes the same way.
    """

    record_retry_seconds: float = 10.0
    """How long a receipt's final write is retried after transient store errors (busy,
    connection lost) before the receipt is left ``prepared`` (seen as uncertain)."""

    def __init__(
        self, *, lock_timeout: float = 30.0, json_limits: JsonLimits = DEFAULT_LIMITS
    ) -> None:
        if (
            isinstance(lock_timeout, bool)
            or not isinstance(lock_timeout, int | float)
            or not 0 < lock_timeout <= 3600
        ):
            raise ConfigurationError(
                "lock_timeout must be a number of seconds in (0, 3600]",
                context={"setting": "lock_timeout"},
            )
        self.lock_timeout = float(lock_timeout)
        if not isinstance(json_limits, JsonLimits) or (
            json_limits.max_depth + ENVELOPE_DEPTH > MAX_DOCUMENT_DEPTH
        ):
            raise ConfigurationError(
                "json_limits must be JsonLimits with max_depth at most "
                f"{MAX_DOCUMENT_DEPTH - ENVELOPE_DEPTH} (a stored document wraps each value)",
                context={"setting": "json_limits"},
            )
        self.json_limits = json_limits
        self._closed = False

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
        return self._turn(thread_id, turn_id, fingerprint)

    @asynccontextmanager
    async def _turn(
        self, thread_id: str, turn_id: str, fingerprint: str | None
    ) -> AsyncIterator[TurnScopeImpl[LeaseT]]:
        async with self.storage_open_turn(thread_id, turn_id) as opened:
            if opened.prior is not None:
                result = opened.prior.result
                _turns.check_fingerprint(
                    opened.prior.fingerprint, fingerprint, thread_id=thread_id, turn_id=turn_id
                )
                scope = TurnScopeImpl(
                    self, thread_id, None, turn_id, fingerprint, result.checkpoint, result
                )
            else:
                assert opened.lease is not None, "storage_open_turn returned neither"
                crash_point(CrashPoint.LEASE_ACQUIRED, thread_id=thread_id, turn_id=turn_id)
                crash_point(CrashPoint.CHECKPOINT_LOADED, thread_id=thread_id, turn_id=turn_id)
                scope = TurnScopeImpl(
                    self, thread_id, opened.lease, turn_id, fingerprint, opened.checkpoint, None
                )
            try:
                yield scope
            finally:
                scope._closed = True

    # ---------------------------------------------------------------- reads

    async def load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None:
        """The thread's latest committed checkpoint (``None`` for a new thread)."""
        validate_thread_id(thread_id)
        self._check_open()
        return await self.storage_load_checkpoint(thread_id)

    async def get_turn(self, thread_id: str, turn_id: str) -> DurableTurnResult | None:
        """The committed result of a turn (``None`` if it never committed)."""
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        self._check_open()
        stored = await self.storage_read_turn(thread_id, turn_id)
        return None if stored is None else stored.result

    async def list_turns(
        self, thread_id: str, *, after_revision: int = 0, limit: int = 100
    ) -> list[DurableTurnResult]:
        """Committed turns of a thread in commit order (by checkpoint revision)."""
        validate_thread_id(thread_id)
        after_revision = check.check_revision(after_revision, "after_revision")
        limit = check.check_limit(limit)
        self._check_open()
        return await self.storage_list_turns(thread_id, after_revision, limit)

    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        """The ledger's receipt for a key of the thread."""
        validate_thread_id(thread_id)
        validate_idempotency_key(idempotency_key)
        self._check_open()
        return await self.storage_get_receipt(thread_id, idempotency_key)

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
        return await self.storage_list_receipts(chosen, thread_id, limit)

    async def reconciliations(
        self, *, thread_id: str | None = None, idempotency_key: str | None = None
    ) -> list[ReconciliationRecord]:
        """The audit records of reconciliations, oldest first."""
        thread_id = check.check_optional_thread_id(thread_id)
        if idempotency_key is not None:
            validate_idempotency_key(idempotency_key)
        self._check_open()
        return await self.storage_reconciliations(thread_id, idempotency_key)

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
        return await self.storage_read_outbox(thread_id, turn_id, after_position, limit)

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
        decision = Reconciliation(
            thread_id, idempotency_key, outcome, stored, note, actor, correct=correct
        )
        if correct:  # only a completed or failed receipt can be corrected: no lease needed
            return await self.storage_reconcile(decision, None)
        existing = await self.storage_get_receipt(thread_id, idempotency_key)
        if not reconcile_takes_lease(existing):
            return await self.storage_reconcile(decision, None)
        # A ``prepared`` receipt may belong to a running turn: hold the thread's lease (waiting
        # for that turn, fencing a paused former holder); still prepared then, it was interrupted.
        async with self.storage_lease(thread_id) as lease:
            return await self.storage_reconcile(decision, lease)

    # ---------------------------------------------------------------- outbox source

    async def claim(self, relay_id: str, *, limit: int, lease: float) -> list[StoredEvent]:
        """Claim up to ``limit`` deliverable events for ``lease`` seconds (``OutboxSource``)."""
        relay_id = check.check_relay_id(relay_id)
        limit = check.check_limit(limit, maximum=10_000)
        seconds = check.check_seconds(lease, "lease")
        self._check_open()
        return await self.storage_claim(relay_id, limit, seconds)

    async def mark_delivered(self, relay_id: str, positions: Sequence[int]) -> int:
        """Record that the sink acknowledged these events; returns how many changed state."""
        relay_id = check.check_relay_id(relay_id)
        chosen = check.check_positions(positions)
        self._check_open()
        return await self.storage_mark_delivered(relay_id, chosen) if chosen else 0

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
        return await self.storage_record_failure(
            relay_id, position, error, seconds, max_attempts, permanent
        )

    async def release(self, relay_id: str, positions: Sequence[int]) -> int:
        """Give back claims without counting an attempt."""
        relay_id = check.check_relay_id(relay_id)
        chosen = check.check_positions(positions)
        self._check_open()
        return await self.storage_release(relay_id, chosen) if chosen else 0

    async def requeue(
        self, positions: Sequence[int] | None = None, *, thread_id: str | None = None
    ) -> int:
        """Make dead events pending again (all, by position, or by thread)."""
        chosen = None if positions is None else check.check_positions(positions)
        thread_id = check.check_optional_thread_id(thread_id)
        self._check_open()
        if chosen == []:
            return 0
        return await self.storage_requeue(chosen, thread_id)

    async def dead_letters(self, *, limit: int = 100) -> list[StoredEvent]:
        """Dead events in position order, with their attempts and reason."""
        limit = check.check_limit(limit, maximum=10_000)
        self._check_open()
        return await self.storage_dead_letters(limit)

    async def prune(self, older_than: float) -> int:
        """Delete events delivered more than ``older_than`` seconds ago."""
        seconds = check.check_seconds(older_than, "older_than")
        self._check_open()
        return await self.storage_prune_outbox(seconds)

    async def outbox_stats(self) -> OutboxStats:
        """Delivery backlog: pending, claimed, dead, delivered, oldest pending age."""
        self._check_open()
        return await self.storage_outbox_stats()

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
        return await self.storage_list_threads(query)

    async def store_status(self) -> StoreStatus:
        """Schema version and counts of threads, turns, open receipts and events."""
        self._check_open()
        return await self.storage_status()

    async def schema_info(self) -> SchemaInfo:
        """The store's schema version against what this code writes."""
        self._check_open()
        return await self.storage_schema_info()

    async def lease_info(self, thread_id: str) -> LeaseInfo:
        """Probe the lease without waiting for it and without disturbing a holder."""
        validate_thread_id(thread_id)
        self._check_open()
        return await self.storage_lease_info(thread_id)

    async def prune_records(self, *, older_than: datetime, dry_run: bool = False) -> PruneReport:
        """Remove turn records and delivered events older than ``older_than``, keeping every
        live obligation (see ``contracts.inspect``)."""
        older_than = check.check_cutoff(older_than)
        dry_run = check.check_flag(dry_run, "dry_run")
        self._check_open()
        return await self.storage_prune_records(older_than, dry_run)

    # ---------------------------------------------------------------- lifetime

    async def close(self) -> None:
        """Release the store's resources; later calls raise ``SCOPE_CLOSED``. Idempotent."""
        if not self._closed:
            self._closed = True
            await self.storage_close()

    async def __aenter__(self) -> DurabilityEngine[LeaseT]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the store is closed", code=ErrorCode.SCOPE_CLOSED)

    async def _stored_equals(self, result: DurableTurnResult) -> bool:
        try:
            stored = await self.storage_read_turn(result.thread_id, result.turn_id)
        except KernelError:
            return False
        return stored is not None and stored.result == result

    # ---------------------------------------------------------------- effects

    async def _execute_effect(
        self, scope: TurnScopeImpl[LeaseT], identity: EffectIdentity, operation: Any
    ) -> EffectExecution:
        lease = scope._held()
        start, cancel = await scope._ledger_write(
            lambda: self._begin_effect(lease, scope.turn_id, identity)
        )
        if cancel is not None:
            if start.action is EffectAction.EXECUTE:
                # This process never reached the provider: provably not applied, so a retry
                # may run it (``failed``), instead of leaving an orphan ``prepared``.
                await self._record(scope, start.receipt, ReceiptStatus.FAILED, NOT_CALLED)
            raise cancel
        if start.action is EffectAction.REPLAY:
            return EffectExecution(value=start.receipt.value, receipt=start.receipt, replayed=True)
        if start.action is EffectAction.UNCERTAIN:
            raise uncertain_error(start.receipt)
        prepared = start.receipt
        crash_point(CrashPoint.EFFECT_PREPARED, key=identity.idempotency_key)
        raw = await self._call(scope, prepared, operation)
        crash_point(CrashPoint.EFFECT_RETURNED, key=identity.idempotency_key)
        try:
            value_json, value = codec.encode_stored(
                raw, limits=self.json_limits, what="effect value"
            )
        except SerializationError as exc:
            final = await self._record(
                scope, prepared, ReceiptStatus.UNCERTAIN, f"value not storable: {exc.code}"
            )
            raise uncertain_error(final, code=ErrorCode.EFFECT_VALUE_NOT_STORABLE) from exc
        completed = finish_receipt(prepared, ReceiptStatus.COMPLETED, value=value, now=self._now())
        await self._write_final(scope, completed, value_json)
        crash_point(CrashPoint.RECEIPT_RECORDED, key=identity.idempotency_key)
        return EffectExecution(value=completed.value, receipt=completed, replayed=False)

    async def _call(
        self, scope: TurnScopeImpl[LeaseT], prepared: EffectReceipt, operation: Any
    ) -> Any:
        """Call the provider; classify how it ended and record non-success durably.

        A synchronous operation is called and its value used like an awaited one. A nested
        ``run_effect`` refused inside the operation (``EFFECT_NESTED``, a programming error)
        records ``failed`` and re-raises that ``UsageError``: the refusal happens where the
        nesting is, so an operation that nests before its provider call (the usual mistake)
        called nothing."""
        token = _IN_EFFECT.set(True)
        try:
            crash_point(CrashPoint.EFFECT_IN_FLIGHT, key=prepared.idempotency_key)
            result = operation(EffectAuthority(prepared.idempotency_key, prepared.id))
            if inspect.isawaitable(result):
                result = await result
            return result
        except SimulatedCrash:
            raise
        except EffectNotAppliedError as exc:
            await self._record(scope, prepared, ReceiptStatus.FAILED, exc.message)
            raise
        except asyncio.CancelledError:
            await self._record(
                scope, prepared, ReceiptStatus.UNCERTAIN, "cancelled during the call"
            )
            raise
        except BaseException as exc:
            if isinstance(exc, UsageError) and exc.code is ErrorCode.EFFECT_NESTED:
                await self._record(scope, prepared, ReceiptStatus.FAILED, NESTED)
                raise
            final = await self._record(
                scope, prepared, ReceiptStatus.UNCERTAIN, f"raised {type(exc).__name__}"
            )
            if isinstance(exc, Exception):
                raise uncertain_error(final) from exc
            raise
        finally:
            _IN_EFFECT.reset(token)

    async def _record(
        self,
        scope: TurnScopeImpl[LeaseT],
        prepared: EffectReceipt,
        status: ReceiptStatus,
        error: str,
    ) -> EffectReceipt:
        """Record a failed/uncertain outcome (see ``_write_final``); the receipt recorded."""
        final = finish_receipt(prepared, status, error=error[:500], now=self._now())
        await self._write_final(scope, final, None)
        return final

    async def _write_final(
        self, scope: TurnScopeImpl[LeaseT], receipt: EffectReceipt, value_json: str | None
    ) -> None:
        """Write a receipt's final state to its end, whatever happens to the caller meanwhile;
        then re-raise a cancellation that arrived. If the write cannot be made, the receipt
        stays ``prepared`` (which operators see as uncertain) and the caller gets
        ``EffectUncertainError``: the outcome in hand could not be kept."""
        lease = scope._held()
        try:
            _, cancel = await scope._ledger_write(
                lambda: self._finish_with_retries(lease, receipt, value_json)
            )
        except KernelError as exc:
            raise uncertain_error(receipt.model_copy(update={"error": UNRECORDED})) from exc
        if cancel is not None:
            raise cancel

    async def _begin_effect(
        self, lease: LeaseT, turn_id: str, identity: EffectIdentity
    ) -> EffectStart:
        """``storage_begin_effect``; after a transient store error, find out whether its write
        landed. A lost connection (or a timeout) does not say: the server may have committed
        ``prepared`` and lost only the answer. Nothing called the provider yet, so when the
        stored receipt is the ``prepared`` stamped with this start's ``now``
        (``own_prepared``), the start is made again with that ``now``: fenced like the first,
        it finds its own ``prepared``, writes nothing, and the provider is called once, here -
        instead of the next delivery taking it for an interrupted call (uncertain).

        The receipt is read, and the start made again, after transient errors for up to
        ``record_retry_seconds``. If the store stays unreachable that long, or the lease was
        lost meanwhile, the error is raised and the receipt is whatever landed: nothing, or a
        ``prepared`` every later reader sees as uncertain (no one could record that it was
        never called)."""
        now = self._now()
        try:
            return await self.storage_begin_effect(lease, turn_id, identity, now)
        except DurabilityError as exc:
            if not _transient(exc):
                raise
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.record_retry_seconds
            stored = await self._read_back(identity.idempotency_key, lease, exc, deadline)
            if not own_prepared(stored, identity, turn_id=turn_id, now=now):
                raise  # nothing of this start is waiting: a redelivery decides afresh
            return await self._restart_effect(lease, turn_id, identity, now, deadline)

    async def _restart_effect(
        self,
        lease: LeaseT,
        turn_id: str,
        identity: EffectIdentity,
        now: datetime,
        deadline: float,
    ) -> EffectStart:
        """The same start again (same ``now``), after transient errors until ``deadline``."""
        loop = asyncio.get_running_loop()
        delay = 0.01
        while True:
            try:
                return await self.storage_begin_effect(lease, turn_id, identity, now)
            except DurabilityError as exc:
                if not _transient(exc) or loop.time() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _read_back(
        self, idempotency_key: str, lease: LeaseT, failure: DurabilityError, deadline: float
    ) -> EffectReceipt | None:
        """The stored receipt, read again after transient errors until ``deadline``;
        ``failure`` is raised when it cannot be read."""
        loop = asyncio.get_running_loop()
        delay = 0.01
        while True:
            try:
                return await self.storage_get_receipt(lease.thread_id, idempotency_key)
            except DurabilityError as exc:
                if not _transient(exc) or loop.time() + delay > deadline:
                    raise failure from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _finish_with_retries(
        self, lease: LeaseT, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        """``storage_finish_effect``, again with back-off after a transient store error (busy, lost
        connection) for up to ``record_retry_seconds``. It is a fenced compare-and-set, so a
        retry is safe while the lease is held; an attempt that did land is recognised."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.record_retry_seconds
        delay = 0.01
        attempts = 0
        while True:
            attempts += 1
            try:
                await self.storage_finish_effect(lease, receipt, value_json)
                return
            except DurabilityError as exc:
                if attempts > 1 and await self._receipt_is(receipt):
                    return  # an earlier attempt committed although its answer was lost
                if not _transient(exc) or loop.time() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _receipt_is(self, receipt: EffectReceipt) -> bool:
        try:
            stored = await self.storage_get_receipt(receipt.thread_id, receipt.idempotency_key)
        except KernelError:
            return False
        return (
            stored is not None
            and stored.id == receipt.id
            and stored.status is receipt.status
            and stored.value == receipt.value
        )


def _transient(exc: DurabilityError) -> bool:
    """A store error worth retrying in place: busy or unreachable, never a lost lease."""
    return exc.retryable and exc.code in (ErrorCode.STORE_BUSY, ErrorCode.STORE_UNAVAILABLE)


class TurnScopeImpl(Generic[LeaseT]):
    """The ``TurnScope`` handed to an operation by ``DurabilityEngine`` (``lease`` is ``None``
    on a replay: a committed turn runs nothing)."""

    __slots__ = (
        "_checkpoint",
        "_closed",
        "_committed",
        "_engine",
        "_fingerprint",
        "_inflight",
        "_lease",
        "_ledger_lock",
        "_maybe_committed",
        "_prior",
        "_thread_id",
        "_turn_id",
    )

    def __init__(
        self,
        engine: DurabilityEngine[LeaseT],
        thread_id: str,
        lease: LeaseT | None,
        turn_id: str,
        fingerprint: str | None,
        checkpoint: KernelCheckpoint | None,
        prior: DurableTurnResult | None,
    ) -> None:
        self._engine = engine
        self._thread_id = thread_id
        self._lease = lease
        self._turn_id = turn_id
        self._fingerprint = fingerprint
        self._checkpoint = checkpoint
        self._prior = prior
        self._closed = False
        self._committed = False
        self._maybe_committed = False
        self._inflight: set[str] = set()
        self._ledger_lock: asyncio.Lock | None = None

    @property
    def thread_id(self) -> str:
        return self._thread_id

    @property
    def turn_id(self) -> str:
        return self._turn_id

    @property
    def checkpoint(self) -> KernelCheckpoint | None:
        return self._checkpoint

    @property
    def prior_result(self) -> DurableTurnResult | None:
        return self._prior

    @property
    def loaded_revision(self) -> int:
        return 0 if self._checkpoint is None else self._checkpoint.revision

    def _held(self) -> LeaseT:
        """The lease of a live (non-replay) scope; ``_ensure_live`` ran before."""
        assert self._lease is not None
        return self._lease

    def _ensure_live(self, action: str) -> None:
        if self._prior is not None:
            raise _turns.already_committed(self.thread_id, self._turn_id)
        if self._closed:
            raise UsageError(
                f"{action} after the turn scope ended",
                code=ErrorCode.SCOPE_CLOSED,
                context={"thread_id": self.thread_id, "turn_id": self._turn_id},
            )

    async def run_effect(
        self, effect: EffectIdentity, operation: Any, *, request: JsonValue = None
    ) -> EffectExecution:
        self._ensure_live("run_effect")
        if self._committed:
            raise UsageError(
                "run_effect after the turn was committed",
                code=ErrorCode.SCOPE_CLOSED,
                context={"thread_id": self.thread_id, "turn_id": self._turn_id},
            )
        if _IN_EFFECT.get():
            raise UsageError(
                "run_effect cannot be called inside another effect's operation",
                code=ErrorCode.EFFECT_NESTED,
            )
        if not isinstance(effect, EffectIdentity):
            raise InvalidInputError("effect must be an EffectIdentity", context={"field": "effect"})
        if not callable(operation):
            raise InvalidInputError("operation must be callable", context={"field": "operation"})
        if request is not None:
            # Digested before any write: a request the codec refuses is refused here.
            digest = codec.fingerprint(request, limits=self._engine.json_limits)
            effect = replace(effect, request_fingerprint=digest)
        key = effect.idempotency_key
        if key in self._inflight:
            raise UsageError(
                "this idempotency key is already running in this turn",
                code=ErrorCode.EFFECT_IN_PROGRESS,
                context={"idempotency_key": key},
            )
        self._inflight.add(key)
        try:
            return await self._engine._execute_effect(self, effect, operation)
        finally:
            self._inflight.discard(key)

    async def _ledger_write(
        self, work: Callable[[], Awaitable[T]]
    ) -> tuple[T, asyncio.CancelledError | None]:
        """One ledger write of this turn, settled (see ``_settle``). Concurrent effects of one
        turn may call their providers at the same time, but their ledger writes go one at a
        time, in call order: they share one lease and its fencing token."""
        if self._ledger_lock is None:
            self._ledger_lock = asyncio.Lock()
        lock = self._ledger_lock

        async def locked() -> T:
            async with lock:
                return await work()

        return await settle(locked())

    async def receipts(self, idempotency_keys: Sequence[str]) -> list[EffectReceipt]:
        """Current ledger receipts for these keys (one adapter read per distinct key)."""
        if self._closed:
            raise UsageError(
                "receipts after the turn scope ended",
                code=ErrorCode.SCOPE_CLOSED,
                context={"thread_id": self.thread_id, "turn_id": self._turn_id},
            )
        if isinstance(idempotency_keys, str):
            raise InvalidInputError(
                "idempotency_keys must be a sequence of keys", context={"field": "idempotency_keys"}
            )
        found: list[EffectReceipt] = []
        for key in dict.fromkeys(idempotency_keys):
            receipt = await self._engine.get_receipt(self.thread_id, key)
            if receipt is not None:
                found.append(receipt)
        return found

    async def commit(self, result: DurableTurnResult, outbox: Sequence[KernelEvent] = ()) -> None:
        self._ensure_live("commit")
        if self._committed:
            raise _turns.already_committed(self.thread_id, self._turn_id)
        if self._inflight:
            raise UsageError(
                "commit while an effect is still running", code=ErrorCode.EFFECT_IN_PROGRESS
            )
        engine = self._engine
        result = _turns.check_result(
            result,
            thread_id=self.thread_id,
            turn_id=self._turn_id,
            loaded_revision=self.loaded_revision,
        )
        limits = engine.json_limits
        events = _turns.check_outbox(
            outbox, thread_id=self.thread_id, turn_id=self._turn_id, limits=limits
        )
        # The parts that may arrive without pydantic's validation (``model_construct``, the
        # kernel's events) are checked here with the codec's rule; the rest by the models.
        codec.check(result.response, limits=limits, what="turn response")
        result_json = encode_model(result, limits=limits, what="turn result")
        events_json = [encode_model(e, limits=limits, what="outbox event") for e in events]
        _turns.check_outbox_size(events_json, limits=limits)
        self._committed = True
        try:
            _, cancel = await settle(
                engine.storage_commit(
                    self._held(),
                    TurnCommit(
                        result=result,
                        result_json=result_json,
                        events=events,
                        events_json=events_json,
                        fingerprint=self._fingerprint,
                        loaded_revision=self.loaded_revision,
                    ),
                )
            )
        except TurnConflictError:
            # After an ambiguous attempt (the store failed without saying whether it
            # committed), finding exactly this result stored means that attempt committed.
            if not (self._maybe_committed and await engine._stored_equals(result)):
                self._committed = False
                raise
            cancel = None
        except BaseException as exc:
            self._committed = False
            if isinstance(exc, DurabilityError) and not isinstance(exc, LeaseLostError):
                self._maybe_committed = True
            raise
        crash_point(CrashPoint.AFTER_COMMIT, thread_id=self.thread_id, turn_id=self._turn_id)
        if cancel is not None:
            raise cancel
