"""The turn's ledger writes over ``TurnStorage``, retried in place after transient errors.

``LedgerWrites`` is what a turn scope needs from its store: the ``TurnStorage`` role, the JSON
limits, a clock and how long a lost write is retried (``retry_seconds()``). It knows
nothing of the store's other roles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Generic

from ..contracts.codec import JsonLimits
from ..contracts.errors import DurabilityError, ErrorCode, KernelError
from ..contracts.receipts import EffectIdentity, EffectReceipt
from ..contracts.turns import DurableTurnResult
from ._ledger import EffectStart, own_prepared
from .storage import LeaseT, TurnStorage

__all__ = ["LedgerWrites", "transient", "utc_now"]


def utc_now() -> datetime:
    return datetime.now(UTC)


def transient(exc: DurabilityError) -> bool:
    """A store error worth retrying in place: busy or unreachable, never a lost lease."""
    return exc.retryable and exc.code in (ErrorCode.STORE_BUSY, ErrorCode.STORE_UNAVAILABLE)


def _closed_store() -> None:
    return None


class LedgerWrites(Generic[LeaseT]):
    """The writes of one store's turns: ``begin`` and ``finish`` of effects, with retries."""

    def __init__(
        self,
        turns: TurnStorage[LeaseT],
        *,
        json_limits: JsonLimits,
        clock: Callable[[], datetime] = utc_now,
        check_open: Callable[[], None] = _closed_store,
        retry_seconds: Callable[[], float] = lambda: 10.0,
    ) -> None:
        self.turns = turns
        self.json_limits = json_limits
        self.clock = clock
        self.check_open = check_open
        self.retry_seconds = retry_seconds
        """How long a receipt's final write is retried after transient store errors (busy,
        connection lost) before the receipt is left ``prepared`` (seen as uncertain); read at
        each write, so a store's ``retry_seconds()`` applies at once."""

    async def begin(self, lease: LeaseT, turn_id: str, identity: EffectIdentity) -> EffectStart:
        """``TurnStorage.begin_effect``; after a transient store error, find out whether its
        write landed. A lost connection (or a timeout) does not say: the server may have
        committed ``prepared`` and lost only the answer. Nothing called the provider yet, so
        when the stored receipt is the ``prepared`` stamped with this start's ``now``
        (``own_prepared``), the start is made again with that ``now``: fenced like the first,
        it finds its own ``prepared``, writes nothing, and the provider is called once, here -
        instead of the next delivery taking it for an interrupted call (uncertain).

        The receipt is read, and the start made again, after transient errors for up to
        ``retry_seconds()``. If the store stays unreachable that long, or the lease was
        lost meanwhile, the error is raised and the receipt is whatever landed: nothing, or a
        ``prepared`` every later reader sees as uncertain (no one could record that it was
        never called)."""
        now = self.clock()
        try:
            return await self.turns.begin_effect(lease, turn_id, identity, now)
        except DurabilityError as exc:
            if not transient(exc):
                raise
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.retry_seconds()
            stored = await self._read_back(identity.idempotency_key, lease, exc, deadline)
            if not own_prepared(stored, identity, turn_id=turn_id, now=now):
                raise  # nothing of this start is waiting: a redelivery decides afresh
            return await self._restart(lease, turn_id, identity, now, deadline)

    async def _restart(
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
                return await self.turns.begin_effect(lease, turn_id, identity, now)
            except DurabilityError as exc:
                if not transient(exc) or loop.time() + delay > deadline:
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
                return await self.turns.get_receipt(lease.thread_id, idempotency_key)
            except DurabilityError as exc:
                if not transient(exc) or loop.time() + delay > deadline:
                    raise failure from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def finish(self, lease: LeaseT, receipt: EffectReceipt, value_json: str | None) -> None:
        """``TurnStorage.finish_effect``, again with back-off after a transient store error
        (busy, lost connection) for up to ``retry_seconds()``. It is a fenced
        compare-and-set, so a retry is safe while the lease is held; an attempt that did land
        is recognised."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_seconds()
        delay = 0.01
        attempts = 0
        while True:
            attempts += 1
            try:
                await self.turns.finish_effect(lease, receipt, value_json)
                return
            except DurabilityError as exc:
                if attempts > 1 and await self._receipt_is(receipt):
                    return  # an earlier attempt committed although its answer was lost
                if not transient(exc) or loop.time() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _receipt_is(self, receipt: EffectReceipt) -> bool:
        try:
            stored = await self.turns.get_receipt(receipt.thread_id, receipt.idempotency_key)
        except KernelError:
            return False
        return (
            stored is not None
            and stored.id == receipt.id
            and stored.status is receipt.status
            and stored.value == receipt.value
        )

    async def stored_equals(self, result: DurableTurnResult) -> bool:
        """Whether exactly ``result`` is stored (an ambiguous commit attempt landed)."""
        try:
            stored = await self.turns.read_turn(result.thread_id, result.turn_id)
        except KernelError:
            return False
        return stored is not None and stored.result == result
