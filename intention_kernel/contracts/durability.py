"""The durability contract: what every store adapter promises.

``Durability.with_turn(thread_id, turn_id, operation)`` runs ``operation(scope)`` as one durable
transaction of a turn. Every adapter (memory, SQLite, PostgreSQL, or yours) must keep these
rules; ``intention_kernel.testing.conformance`` checks each one by name.

1. **Serialize per thread.** One holder of a thread's lease at a time, across processes and
   machines; other threads are never blocked. No database transaction stays open while the
   operation runs. A crashed holder's lease is released promptly. A holder that lost its lease
   must not write: every ledger write and the commit check the lease epoch in the same
   transaction and raise ``LeaseLostError`` otherwise. Waiting is bounded and raises a
   retryable ``DurabilityError`` with code ``LOCK_TIMEOUT``.
2. **Load the latest checkpoint** while holding the lease (``scope.checkpoint``).
3. **Replay.** A committed ``(thread_id, turn_id)`` sets ``scope.prior_result``; callers return
   it and run nothing. ``commit`` and ``run_effect`` on such a scope raise
   ``TURN_ALREADY_COMMITTED``; ``scope.checkpoint`` is then the checkpoint that turn committed.
   A stored request fingerprint that differs from the retry's raises ``TURN_ID_REUSED``.
4. **Effects.** ``run_effect`` deduplicates by idempotency key within the thread, across turns,
   independently of turn replay: ``prepared`` is committed before the operation is called and
   ``completed`` before ``run_effect`` returns; a ``completed`` receipt is replayed without a
   call; ``prepared`` found at start becomes ``uncertain``; ``uncertain`` always raises
   ``EffectUncertainError``; ``EffectNotAppliedError`` records ``failed`` (a retry may run, with
   the same receipt id); any other exception, cancellation or timeout records ``uncertain``; a
   value that cannot be stored records ``uncertain``; a key bound to another capability raises
   ``IDEMPOTENCY_KEY_COLLISION``, and a key first run with another ``request`` raises
   ``EFFECT_REQUEST_MISMATCH`` (both before any call); nested ``run_effect`` is refused
   (``EFFECT_NESTED``; the outer receipt records ``failed``); a synchronous operation is called
   and its value used. ``scope.receipts(keys)`` reads the ledger's current receipts of the
   thread (e.g. after ``reconcile``).
5. **Atomic commit** of result, successor checkpoint and outbox, once per scope, durably. The
   successor's revision must be the loaded revision + 1, checked against the store at commit
   time (``CHECKPOINT_REVISION_CONFLICT``).
6. A failed operation commits nothing; effects it completed stay in the ledger.
7. Everything survives process restarts (the memory adapter is test-only).

Example::

    async def operation(scope: TurnScope) -> DurableTurnResult:
        if scope.prior_result is not None:
            return scope.prior_result
        charge = await scope.run_effect(
            EffectIdentity("payments.charge:pi_123", "payments.charge"),
            lambda authority: payments.charge(idempotency_key=authority.idempotency_key),
        )
        result = DurableTurnResult(...)
        await scope.commit(result, outbox=[...])
        return result

    await durability.with_turn("thread-1", "turn-7", operation)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeVar

from pydantic import JsonValue

from .checkpoint import KernelCheckpoint
from .events import KernelEvent, StoredEvent
from .receipts import (
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
from .turns import DurableTurnResult

__all__ = ["Durability", "DurabilityStore", "EffectOperation", "TurnScope"]

T = TypeVar("T")

EffectOperation = Callable[[EffectAuthority], Awaitable[JsonValue] | JsonValue]
"""The external write: receives the authority, returns a JSON-storable value (a coroutine
function, or a plain function whose value is used as is)."""


class TurnScope(Protocol):
    """The handle an operation gets inside ``with_turn``."""

    @property
    def thread_id(self) -> str: ...

    @property
    def turn_id(self) -> str: ...

    @property
    def checkpoint(self) -> KernelCheckpoint | None:
        """Latest checkpoint, loaded while holding the lease (``None`` for a new thread)."""
        ...

    @property
    def prior_result(self) -> DurableTurnResult | None:
        """The committed result when this turn id was already committed (a replay)."""
        ...

    async def run_effect(
        self, effect: EffectIdentity, operation: EffectOperation, *, request: JsonValue = None
    ) -> EffectExecution:
        """Run an external write at most once per idempotency key (rule 4).

        ``request`` is what the write asks for (e.g. the validated capability input): its
        fingerprint is kept on the receipt, and the same key with another request raises
        ``EffectConflictError(EFFECT_REQUEST_MISMATCH)`` without a call. It must be JSON
        under the codec's rule (``SerializationError`` otherwise, before any write)."""
        ...

    async def commit(
        self,
        result: DurableTurnResult,
        outbox: Sequence[KernelEvent] = (),
        *,
        progress: Sequence[str] = (),
    ) -> None:
        """Atomically commit result, successor checkpoint and outbox events (rule 5).

        ``progress``: the last items of the turn's progress log (JSON texts, see
        ``contracts.inbox``), written by the same transaction instead of a statement of their
        own; advisory, like every progress item."""
        ...

    async def receipts(self, idempotency_keys: Sequence[str]) -> list[EffectReceipt]:
        """The ledger's current receipts of this thread for these keys, in the given order,
        skipping keys with none (a read: no lease write, no effect). The kernel calls it at the
        start of a turn, only for the receipts its checkpoint holds as ``uncertain``, so a
        reconciliation reaches the checkpoint's copy (and the user) on the next turn."""
        ...


class Durability(Protocol):
    """The turn boundary (spec: ``Durability.withTurn``)."""

    async def with_turn(
        self,
        thread_id: str,
        turn_id: str,
        operation: Callable[[TurnScope], Awaitable[T]],
        *,
        request_fingerprint: str | None = None,
    ) -> T: ...

    def turn(
        self, thread_id: str, turn_id: str, *, request_fingerprint: str | None = None
    ) -> AbstractAsyncContextManager[TurnScope]:
        """The same boundary as an ``async with`` block (one code path with ``with_turn``)."""
        ...

    async def close(self) -> None: ...


class DurabilityStore(Durability, Protocol):
    """A durable store: the turn boundary plus reading back and reconciliation."""

    async def load_checkpoint(self, thread_id: str) -> KernelCheckpoint | None: ...

    async def get_turn(self, thread_id: str, turn_id: str) -> DurableTurnResult | None: ...

    async def list_turns(
        self, thread_id: str, *, after_revision: int = 0, limit: int = 100
    ) -> list[DurableTurnResult]:
        """Committed turns of a thread in commit order (by checkpoint revision)."""
        ...

    async def get_receipt(self, thread_id: str, idempotency_key: str) -> EffectReceipt | None: ...

    async def list_receipts(
        self,
        *,
        status: ReceiptStatus | None = None,
        thread_id: str | None = None,
        limit: int = 100,
    ) -> list[EffectReceipt]:
        """Receipts across threads, oldest update first, as stored. ``status=UNCERTAIN`` lists
        the receipts waiting for an operator: ``uncertain`` ones and interrupted ``prepared``
        ones (no live holder has the thread's lease); other statuses filter the stored one."""
        ...

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
        """Resolve an ``uncertain`` receipt: ``completed`` (with the provider's value, which
        must be given: ``value=None`` records JSON ``null``, an omitted value is refused) or
        ``not_applied`` (becomes ``failed`` so a retry may run; no value). Keeps an audit
        record.

        ``correct=True`` corrects a receipt's last reconciliation instead (the receipt must
        still be as that reconciliation left it, else ``RECEIPT_NOT_RECONCILED``): the receipt
        takes the new outcome and value, and a new audit record names the one it supersedes;
        every record stays in ``reconciliations()``.

        An interrupted ``prepared`` receipt is resolved too: the store takes the thread's lease
        for the write (waiting up to its lock timeout for a running turn, then ``LOCK_TIMEOUT``)
        and moves its epoch, so no turn can still be running the effect."""
        ...

    async def reconciliations(
        self, *, thread_id: str | None = None, idempotency_key: str | None = None
    ) -> list[ReconciliationRecord]: ...

    async def read_outbox(
        self,
        *,
        thread_id: str | None = None,
        turn_id: str | None = None,
        after_position: int = 0,
        limit: int = 1000,
    ) -> list[StoredEvent]:
        """Committed outbox events in commit order (turn order, then sequence)."""
        ...
