"""The turn and effect algorithm, written once for every adapter.

``DurabilityEngine`` implements ``with_turn``, ``TurnScope.run_effect`` and ``commit`` over a few
storage primitives that an adapter provides (each one short, fenced transaction). Keeping the
ordering here - prepared committed before the call, crash points, exception classification,
nesting and closed-scope guards - means the adapters cannot drift from each other.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

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
from ..contracts.events import KernelEvent
from ..contracts.ids import (
    validate_id,
    validate_idempotency_key,
    validate_thread_id,
    validate_turn_id,
)
from ..contracts.receipts import (
    EffectAuthority,
    EffectExecution,
    EffectIdentity,
    EffectReceipt,
    ReceiptStatus,
    ReconcileOutcome,
)
from ..contracts.turns import DurableTurnResult
from ..crashpoints import CrashPoint, SimulatedCrash, crash_point
from . import _turns
from ._documents import encode_model
from ._ledger import (
    EffectAction,
    EffectStart,
    finish_receipt,
    reconcile_takes_lease,
    uncertain_error,
)
from ._settle import settle

__all__ = ["DurabilityEngine", "Lease", "StoredTurn", "TurnCommit", "TurnScopeImpl"]

T = TypeVar("T")

_IN_EFFECT: contextvars.ContextVar[bool] = contextvars.ContextVar("ik_in_effect", default=False)
MAX_NOTE_LENGTH = 4000
NOT_CALLED = "cancelled before the provider was called"
UNRECORDED = "the outcome could not be recorded"


@dataclass(slots=True)
class Lease:
    """Proof of holding a thread: ``epoch`` is the fencing token every write checks."""

    thread_id: str
    epoch: int


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


@dataclass(frozen=True, slots=True)
class StoredTurn:
    result: DurableTurnResult
    fingerprint: str | None


class DurabilityEngine(ABC):
    """Base class of the durable adapters. Subclasses implement the ``_primitives``."""

    record_retry_seconds: float = 10.0
    """How long a receipt's final write is retried after transient store errors (busy,
    connection lost) before the receipt is left ``prepared`` (seen as uncertain)."""

    def __init__(
        self, *, lock_timeout: float = 30.0, json_limits: JsonLimits = DEFAULT_LIMITS
    ) -> None:
        if not isinstance(lock_timeout, int | float) or not 0 < lock_timeout <= 3600:
            raise ConfigurationError(
                "lock_timeout must be a number of seconds in (0, 3600]",
                context={"setting": "lock_timeout"},
            )
        self.lock_timeout = float(lock_timeout)
        self.json_limits = json_limits
        self._closed = False
        # Test-only planted bug for fault tests: call the provider before recording `prepared`.
        self._prepare_after_call = os.environ.get("IK_PLANTED_BUG") == "prepare_after_call"

    # ---------------------------------------------------------------- primitives

    @abstractmethod
    async def _find_turn(self, thread_id: str, turn_id: str) -> StoredTurn | None:
        """Read a committed turn without taking the lease (committed turns never change)."""

    @abstractmethod
    def _lease(self, thread_id: str) -> AbstractAsyncContextManager[Lease]:
        """Hold the thread's lease for the block, waiting at most ``self.lock_timeout``."""

    @abstractmethod
    async def _load(
        self, lease: Lease, turn_id: str
    ) -> tuple[StoredTurn | None, KernelCheckpoint | None]:
        """Under the lease: the committed turn (if any) and the latest checkpoint."""

    @abstractmethod
    async def _begin_effect(
        self, lease: Lease, turn_id: str, identity: EffectIdentity
    ) -> EffectStart:
        """One fenced transaction: read the receipt, apply ``_ledger.start_effect``, write
        ``start.receipt`` when ``start.write``, commit durably."""

    @abstractmethod
    async def _finish_effect(
        self, lease: Lease, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        """One fenced, durable write of the receipt's final state."""

    @abstractmethod
    async def _commit(self, lease: Lease, commit: TurnCommit) -> None:
        """One fenced, durable transaction: turn row (unique), head revision compare-and-set
        from ``loaded_revision``, outbox rows. Calls ``crash_point(INSIDE_COMMIT)`` before
        committing."""

    @abstractmethod
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
        """One durable transaction: read the receipt, apply ``_ledger.resolve_uncertain``
        (``holds_lease=lease is not None``), write the receipt and the audit record. With a
        ``lease``, the transaction is fenced by it like a turn's write."""

    @abstractmethod
    async def _close(self) -> None: ...

    def _now(self) -> datetime:
        return datetime.now(UTC)

    # ---------------------------------------------------------------- public API

    @abstractmethod
    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        """The ledger's receipt (``DurabilityStore.get_receipt``); used by ``receipts``."""

    @abstractmethod
    async def get_turn(self, thread_id: str, turn_id: str) -> DurableTurnResult | None:
        """The committed result (``DurabilityStore.get_turn``)."""

    async def _stored_equals(self, result: DurableTurnResult) -> bool:
        try:
            stored = await self.get_turn(result.thread_id, result.turn_id)
        except KernelError:
            return False
        return stored == result

    async def with_turn(
        self,
        thread_id: str,
        turn_id: str,
        operation: Callable[[TurnScopeImpl], Awaitable[T]],
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
    ) -> AbstractAsyncContextManager[TurnScopeImpl]:
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        fingerprint = _turns.validate_fingerprint(request_fingerprint)
        self._check_open()
        return self._turn(thread_id, turn_id, fingerprint)

    @asynccontextmanager
    async def _turn(
        self, thread_id: str, turn_id: str, fingerprint: str | None
    ) -> AsyncIterator[TurnScopeImpl]:
        prior = await self._find_turn(thread_id, turn_id)
        if prior is not None:
            async with self._replay_scope(prior, fingerprint) as scope:
                yield scope
            return
        async with self._lease(thread_id) as lease:
            crash_point(CrashPoint.LEASE_ACQUIRED, thread_id=thread_id, turn_id=turn_id)
            prior, checkpoint = await self._load(lease, turn_id)
            if prior is not None:
                async with self._replay_scope(prior, fingerprint) as scope:
                    yield scope
                return
            crash_point(CrashPoint.CHECKPOINT_LOADED, thread_id=thread_id, turn_id=turn_id)
            scope = TurnScopeImpl(self, lease, turn_id, fingerprint, checkpoint, None)
            try:
                yield scope
            finally:
                scope._closed = True

    @asynccontextmanager
    async def _replay_scope(
        self, prior: StoredTurn, fingerprint: str | None
    ) -> AsyncIterator[TurnScopeImpl]:
        result = prior.result
        _turns.check_fingerprint(
            prior.fingerprint, fingerprint, thread_id=result.thread_id, turn_id=result.turn_id
        )
        lease = Lease(result.thread_id, -1)
        scope = TurnScopeImpl(self, lease, result.turn_id, fingerprint, result.checkpoint, result)
        try:
            yield scope
        finally:
            scope._closed = True

    async def reconcile(
        self,
        thread_id: str,
        idempotency_key: str,
        outcome: ReconcileOutcome,
        *,
        value: JsonValue = None,
        note: str,
        actor: str,
    ) -> EffectReceipt:
        """Resolve an uncertain receipt (see ``DurabilityStore.reconcile``)."""
        validate_thread_id(thread_id)
        validate_idempotency_key(idempotency_key)
        validate_id(actor, "actor")
        if outcome not in ("completed", "not_applied"):
            raise InvalidInputError(
                "outcome must be 'completed' or 'not_applied'", context={"field": "outcome"}
            )
        if outcome == "not_applied" and value is not None:
            raise InvalidInputError(
                "a not_applied resolution carries no value", context={"field": "value"}
            )
        if not isinstance(note, str) or not note.strip() or len(note) > MAX_NOTE_LENGTH:
            raise InvalidInputError(
                f"note must be non-blank text of at most {MAX_NOTE_LENGTH} characters",
                context={"field": "note"},
            )
        value = codec.round_trip(value, limits=self.json_limits, what="reconciled value")
        self._check_open()

        async def resolve(lease: Lease | None) -> EffectReceipt:
            return await self._reconcile(
                thread_id,
                idempotency_key,
                outcome,
                value=value,
                note=note,
                actor=actor,
                lease=lease,
            )

        if not reconcile_takes_lease(await self.get_receipt(thread_id, idempotency_key)):
            return await resolve(None)
        # A ``prepared`` receipt may belong to a running turn: hold the thread's lease (waiting
        # for that turn, fencing a paused former holder); still prepared then, it was interrupted.
        async with self._lease(thread_id) as lease:
            return await resolve(lease)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._close()

    async def __aenter__(self) -> DurabilityEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the durability adapter is closed", code=ErrorCode.SCOPE_CLOSED)

    # ---------------------------------------------------------------- effects

    async def _execute_effect(
        self, scope: TurnScopeImpl, identity: EffectIdentity, operation: Any
    ) -> EffectExecution:
        lease = scope._lease
        if self._prepare_after_call:  # planted bug, test-only
            authority = EffectAuthority(identity.idempotency_key, "planted")
            await operation(authority)
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
        if self._prepare_after_call:
            raw: Any = None
        else:
            raw = await self._call(scope, prepared, operation)
        crash_point(CrashPoint.EFFECT_RETURNED, key=identity.idempotency_key)
        try:
            value_json, value = codec.encode_stored(
                raw, limits=self.json_limits, what="effect value"
            )
        except SerializationError as exc:
            await self._record(
                scope, prepared, ReceiptStatus.UNCERTAIN, f"value not storable: {exc.code}"
            )
            raise uncertain_error(prepared, code=ErrorCode.EFFECT_VALUE_NOT_STORABLE) from exc
        completed = finish_receipt(prepared, ReceiptStatus.COMPLETED, value=value, now=self._now())
        await self._write_final(scope, completed, value_json)
        crash_point(CrashPoint.RECEIPT_RECORDED, key=identity.idempotency_key)
        return EffectExecution(value=completed.value, receipt=completed, replayed=False)

    async def _call(self, scope: TurnScopeImpl, prepared: EffectReceipt, operation: Any) -> Any:
        """Call the provider; classify how it ended and record non-success durably."""
        token = _IN_EFFECT.set(True)
        try:
            crash_point(CrashPoint.EFFECT_IN_FLIGHT, key=prepared.idempotency_key)
            return await operation(EffectAuthority(prepared.idempotency_key, prepared.id))
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
            await self._record(
                scope, prepared, ReceiptStatus.UNCERTAIN, f"raised {type(exc).__name__}"
            )
            if isinstance(exc, Exception):
                raise uncertain_error(
                    prepared.model_copy(update={"error": f"raised {type(exc).__name__}"})
                ) from exc
            raise
        finally:
            _IN_EFFECT.reset(token)

    async def _record(
        self, scope: TurnScopeImpl, prepared: EffectReceipt, status: ReceiptStatus, error: str
    ) -> None:
        """Record a failed/uncertain outcome (see ``_write_final``)."""
        final = finish_receipt(prepared, status, error=error[:500], now=self._now())
        await self._write_final(scope, final, None)

    async def _write_final(
        self, scope: TurnScopeImpl, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        """Write a receipt's final state to its end, whatever happens to the caller meanwhile;
        then re-raise a cancellation that arrived. If the write cannot be made, the receipt
        stays ``prepared`` (which operators see as uncertain) and the caller gets
        ``EffectUncertainError``: the outcome in hand could not be kept."""
        lease = scope._lease
        try:
            _, cancel = await scope._ledger_write(
                lambda: self._finish_with_retries(lease, receipt, value_json)
            )
        except KernelError as exc:
            raise uncertain_error(receipt.model_copy(update={"error": UNRECORDED})) from exc
        if cancel is not None:
            raise cancel

    async def _finish_with_retries(
        self, lease: Lease, receipt: EffectReceipt, value_json: str | None
    ) -> None:
        """``_finish_effect``, again with back-off after a transient store error (busy, lost
        connection) for up to ``record_retry_seconds``. It is a fenced compare-and-set, so a
        retry is safe while the lease is held; an attempt that did land is recognised."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.record_retry_seconds
        delay = 0.01
        attempts = 0
        while True:
            attempts += 1
            try:
                await self._finish_effect(lease, receipt, value_json)
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
            stored = await self.get_receipt(receipt.thread_id, receipt.idempotency_key)
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


class TurnScopeImpl:
    """The ``TurnScope`` handed to an operation by ``DurabilityEngine``."""

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
        "_turn_id",
    )

    def __init__(
        self,
        engine: DurabilityEngine,
        lease: Lease,
        turn_id: str,
        fingerprint: str | None,
        checkpoint: KernelCheckpoint | None,
        prior: DurableTurnResult | None,
    ) -> None:
        self._engine = engine
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
        return self._lease.thread_id

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

    def _ensure_live(self, action: str) -> None:
        if self._prior is not None:
            raise _turns.already_committed(self.thread_id, self._turn_id)
        if self._closed:
            raise UsageError(
                f"{action} after the turn scope ended",
                code=ErrorCode.SCOPE_CLOSED,
                context={"thread_id": self.thread_id, "turn_id": self._turn_id},
            )

    async def run_effect(self, effect: EffectIdentity, operation: Any) -> EffectExecution:
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
        events = _turns.check_outbox(outbox, thread_id=self.thread_id, turn_id=self._turn_id)
        limits = engine.json_limits
        result_json = encode_model(result, limits=limits, what="turn result")
        events_json = [encode_model(e, limits=limits, what="outbox event") for e in events]
        self._committed = True
        try:
            _, cancel = await settle(
                engine._commit(
                    self._lease,
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
