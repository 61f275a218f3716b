"""The turn scope: the effect algorithm and the commit of one turn, over ``TurnStorage``.

``open_scope`` opens a turn with ``TurnStorage.open_turn`` and hands the operation a
``TurnScopeImpl``; the scope needs only ``LedgerWrites`` (the role, the JSON limits, a clock
and the retry budget), never the store that made it.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, Generic, TypeVar

from pydantic import JsonValue

from .._crashpoints import CrashPoint, SimulatedCrash, crash_point
from ..contracts import codec
from ..contracts.checkpoint import KernelCheckpoint
from ..contracts.errors import (
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
from ..contracts.ids import validate_idempotency_key
from ..contracts.receipts import (
    EffectAuthority,
    EffectExecution,
    EffectIdentity,
    EffectReceipt,
    ReceiptStatus,
)
from ..contracts.turns import DurableTurnResult
from . import _turns
from ._documents import encode_model
from ._ledger import EffectAction, finish_receipt, uncertain_error
from ._settle import settle
from ._writes import LedgerWrites
from .storage import LeaseT, TurnCommit

__all__ = ["TurnScopeImpl", "open_scope"]

T = TypeVar("T")

_IN_EFFECT: contextvars.ContextVar[bool] = contextvars.ContextVar("ik_in_effect", default=False)
NOT_CALLED = "cancelled before the provider was called"
UNRECORDED = "the outcome could not be recorded"
NESTED = "refused: the operation called run_effect (nested effects are a programming error)"


class TurnScopeImpl(Generic[LeaseT]):
    """The ``TurnScope`` handed to an operation by ``open_scope`` (``lease`` is ``None`` on a
    replay: a committed turn runs nothing). It owns the effect algorithm (ordering, crash
    points, exception classification, nesting and closed-scope guards) and the commit; it
    writes through ``LedgerWrites`` only."""

    __slots__ = (
        "_checkpoint",
        "_closed",
        "_committed",
        "_fingerprint",
        "_inflight",
        "_lease",
        "_ledger_lock",
        "_maybe_committed",
        "_prior",
        "_thread_id",
        "_turn_id",
        "_writes",
    )

    def __init__(
        self,
        writes: LedgerWrites[LeaseT],
        thread_id: str,
        lease: LeaseT | None,
        turn_id: str,
        fingerprint: str | None,
        checkpoint: KernelCheckpoint | None,
        prior: DurableTurnResult | None,
    ) -> None:
        self._writes = writes
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
            digest = codec.fingerprint(request, limits=self._writes.json_limits)
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
            return await self._execute(effect, operation)
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

    async def _execute(self, identity: EffectIdentity, operation: Any) -> EffectExecution:
        """The effect algorithm: ``prepared``, the call, the final receipt (rule 4)."""
        lease = self._held()
        writes = self._writes
        start, cancel = await self._ledger_write(
            lambda: writes.begin(lease, self._turn_id, identity)
        )
        if cancel is not None:
            if start.action is EffectAction.EXECUTE:
                # This process never reached the provider: provably not applied, so a retry
                # may run it (``failed``), instead of leaving an orphan ``prepared``.
                await self._record(start.receipt, ReceiptStatus.FAILED, NOT_CALLED)
            raise cancel
        if start.action is EffectAction.REPLAY:
            return EffectExecution(value=start.receipt.value, receipt=start.receipt, replayed=True)
        if start.action is EffectAction.UNCERTAIN:
            raise uncertain_error(start.receipt)
        prepared = start.receipt
        crash_point(CrashPoint.EFFECT_PREPARED, key=identity.idempotency_key)
        raw = await self._call(prepared, operation)
        crash_point(CrashPoint.EFFECT_RETURNED, key=identity.idempotency_key)
        try:
            value_json, value = codec.encode_stored(
                raw, limits=writes.json_limits, what="effect value"
            )
        except SerializationError as exc:
            final = await self._record(
                prepared, ReceiptStatus.UNCERTAIN, f"value not storable: {exc.code}"
            )
            raise uncertain_error(final, code=ErrorCode.EFFECT_VALUE_NOT_STORABLE) from exc
        completed = finish_receipt(
            prepared, ReceiptStatus.COMPLETED, value=value, now=self._writes.clock()
        )
        await self._write_final(completed, value_json)
        crash_point(CrashPoint.RECEIPT_RECORDED, key=identity.idempotency_key)
        return EffectExecution(value=completed.value, receipt=completed, replayed=False)

    async def _call(self, prepared: EffectReceipt, operation: Any) -> Any:
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
            await self._record(prepared, ReceiptStatus.FAILED, exc.message)
            raise
        except asyncio.CancelledError:
            await self._record(prepared, ReceiptStatus.UNCERTAIN, "cancelled during the call")
            raise
        except BaseException as exc:
            if isinstance(exc, UsageError) and exc.code is ErrorCode.EFFECT_NESTED:
                await self._record(prepared, ReceiptStatus.FAILED, NESTED)
                raise
            final = await self._record(
                prepared, ReceiptStatus.UNCERTAIN, f"raised {type(exc).__name__}"
            )
            if isinstance(exc, Exception):
                raise uncertain_error(final) from exc
            raise
        finally:
            _IN_EFFECT.reset(token)

    async def _record(
        self, prepared: EffectReceipt, status: ReceiptStatus, error: str
    ) -> EffectReceipt:
        """Record a failed/uncertain outcome (see ``_write_final``); the receipt recorded."""
        final = finish_receipt(prepared, status, error=error[:500], now=self._writes.clock())
        await self._write_final(final, None)
        return final

    async def _write_final(self, receipt: EffectReceipt, value_json: str | None) -> None:
        """Write a receipt's final state to its end, whatever happens to the caller meanwhile;
        then re-raise a cancellation that arrived. If the write cannot be made, the receipt
        stays ``prepared`` (which operators see as uncertain) and the caller gets
        ``EffectUncertainError``: the outcome in hand could not be kept."""
        lease, writes = self._held(), self._writes
        try:
            _, cancel = await self._ledger_write(lambda: writes.finish(lease, receipt, value_json))
        except KernelError as exc:
            raise uncertain_error(receipt.model_copy(update={"error": UNRECORDED})) from exc
        if cancel is not None:
            raise cancel

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
            validate_idempotency_key(key)
            self._writes.check_open()
            receipt = await self._writes.turns.get_receipt(self.thread_id, key)
            if receipt is not None:
                found.append(receipt)
        return found

    async def commit(
        self,
        result: DurableTurnResult,
        outbox: Sequence[KernelEvent] = (),
        *,
        progress: Sequence[str] = (),
    ) -> None:
        self._ensure_live("commit")
        if self._committed:
            raise _turns.already_committed(self.thread_id, self._turn_id)
        if self._inflight:
            raise UsageError(
                "commit while an effect is still running", code=ErrorCode.EFFECT_IN_PROGRESS
            )
        writes = self._writes
        result = _turns.check_result(
            result,
            thread_id=self.thread_id,
            turn_id=self._turn_id,
            loaded_revision=self.loaded_revision,
        )
        limits = writes.json_limits
        events = _turns.check_outbox(
            outbox, thread_id=self.thread_id, turn_id=self._turn_id, limits=limits
        )
        # The parts that may arrive without pydantic's validation (``model_construct``, the
        # kernel's events) are checked here with the codec's rule; the rest by the models.
        codec.check(result.response, limits=limits, what="turn response")
        result_json = encode_model(result, limits=limits, what="turn result")
        events_json = [encode_model(e, limits=limits, what="outbox event") for e in events]
        _turns.check_outbox_size(events_json, limits=limits)
        progress = _turns.check_progress(progress)
        self._committed = True
        try:
            _, cancel = await settle(
                writes.turns.commit(
                    self._held(),
                    TurnCommit(
                        result=result,
                        result_json=result_json,
                        events=events,
                        events_json=events_json,
                        fingerprint=self._fingerprint,
                        loaded_revision=self.loaded_revision,
                        progress=progress,
                    ),
                )
            )
        except TurnConflictError:
            # After an ambiguous attempt (the store failed without saying whether it
            # committed), finding exactly this result stored means that attempt committed.
            if not (self._maybe_committed and await writes.stored_equals(result)):
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

    def end(self) -> None:
        """The block ended: every later call is refused with ``SCOPE_CLOSED``."""
        self._closed = True


@asynccontextmanager
async def open_scope(
    writes: LedgerWrites[LeaseT], thread_id: str, turn_id: str, fingerprint: str | None
) -> AsyncIterator[TurnScopeImpl[LeaseT]]:
    """The durable boundary of one turn over ``writes.turns`` (arguments already checked)."""
    async with writes.turns.open_turn(thread_id, turn_id) as opened:
        if opened.prior is not None:
            result = opened.prior.result
            _turns.check_fingerprint(
                opened.prior.fingerprint, fingerprint, thread_id=thread_id, turn_id=turn_id
            )
            scope = TurnScopeImpl(
                writes, thread_id, None, turn_id, fingerprint, result.checkpoint, result
            )
        else:
            assert opened.lease is not None, "open_turn returned neither"
            crash_point(CrashPoint.LEASE_ACQUIRED, thread_id=thread_id, turn_id=turn_id)
            crash_point(CrashPoint.CHECKPOINT_LOADED, thread_id=thread_id, turn_id=turn_id)
            scope = TurnScopeImpl(
                writes, thread_id, opened.lease, turn_id, fingerprint, opened.checkpoint, None
            )
        try:
            yield scope
        finally:
            scope.end()
