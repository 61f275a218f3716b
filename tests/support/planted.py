"""Planted bugs: test-only wrappers that break one promise on purpose.

A fault test is only worth its run time if it fails on the bug it targets. A planted bug wraps
the ``TurnScope`` a store hands out (``class Broken(PrepareAfterCall, SQLiteDurability)``), so
a test can show that it catches it. None of it is in a production class.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from pydantic import JsonValue

from intention_kernel.contracts.checkpoint import KernelCheckpoint
from intention_kernel.contracts.events import KernelEvent
from intention_kernel.contracts.receipts import (
    EffectAuthority,
    EffectExecution,
    EffectIdentity,
    EffectReceipt,
)
from intention_kernel.contracts.turns import DurableTurnResult
from intention_kernel.durability.store import DurableStore

__all__ = ["CallBeforePrepare", "PrepareAfterCall"]


class CallBeforePrepare:
    """A ``TurnScope`` that calls the provider *before* ``prepared`` is recorded: a crash in
    between leaves no receipt, so a retry calls the provider again (the bug rule 4 forbids)."""

    def __init__(self, scope: Any) -> None:
        self._scope = scope

    @property
    def thread_id(self) -> str:
        return str(self._scope.thread_id)

    @property
    def turn_id(self) -> str:
        return str(self._scope.turn_id)

    @property
    def checkpoint(self) -> KernelCheckpoint | None:
        checkpoint: KernelCheckpoint | None = self._scope.checkpoint
        return checkpoint

    @property
    def prior_result(self) -> DurableTurnResult | None:
        prior: DurableTurnResult | None = self._scope.prior_result
        return prior

    @property
    def loaded_revision(self) -> int:
        return int(self._scope.loaded_revision)

    async def run_effect(
        self, effect: EffectIdentity, operation: Any, *, request: JsonValue = None
    ) -> EffectExecution:
        await operation(EffectAuthority(effect.idempotency_key, "planted"))

        async def already_called(authority: EffectAuthority) -> None:
            return None

        execution: EffectExecution = await self._scope.run_effect(
            effect, already_called, request=request
        )
        return execution

    async def receipts(self, idempotency_keys: Sequence[str]) -> list[EffectReceipt]:
        found: list[EffectReceipt] = await self._scope.receipts(idempotency_keys)
        return found

    async def commit(self, result: DurableTurnResult, outbox: Sequence[KernelEvent] = ()) -> None:
        await self._scope.commit(result, outbox)


class PrepareAfterCall(DurableStore[Any]):
    """Put first in a store's bases: its turns hand out ``CallBeforePrepare`` scopes."""

    def turn(
        self, thread_id: str, turn_id: str, *, request_fingerprint: str | None = None
    ) -> AbstractAsyncContextManager[Any]:
        return _wrapped(super().turn(thread_id, turn_id, request_fingerprint=request_fingerprint))


@asynccontextmanager
async def _wrapped(opened: AbstractAsyncContextManager[Any]) -> AsyncIterator[CallBeforePrepare]:
    async with opened as scope:
        yield CallBeforePrepare(scope)
