"""The invariants one process can see after a case: the provider's call counts, the stored
turn, the head, the outbox and every receipt (see the explorer's docstring for the list)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import JsonValue

from ...contracts.durability import DurabilityStore
from ...contracts.errors import EffectUncertainError, KernelError, TurnConflictError
from ...contracts.receipts import EffectAuthority, ReceiptStatus
from ._faults import KEYS, Driver, Fault, Shape
from ._support import effect, latest_checkpoint

__all__ = ["EVENTS", "CountingProvider", "Deliveries", "check_invariants", "hidden_prepared"]

EVENTS = 2


class CountingProvider:
    """The external provider: counts calls per key and checks ``prepared`` is durable first."""

    def __init__(self, store: DurabilityStore, thread_id: str) -> None:
        self.store = store
        self.thread_id = thread_id
        self.calls: Counter[str] = Counter()
        self.entered: Counter[str] = Counter()
        """Operations the engine handed control to (a cancel may stop one before the call)."""
        self.problems: list[str] = []

    def operation(self, key: str) -> Callable[[EffectAuthority], Awaitable[JsonValue]]:
        async def call(authority: EffectAuthority) -> JsonValue:
            self.entered[key] += 1
            stored = await self.store.get_receipt(self.thread_id, authority.idempotency_key)
            if stored is None or stored.status is not ReceiptStatus.PREPARED:
                self.problems.append(f"I5a: provider called for {key} without a durable prepared")
            self.calls[key] += 1
            await asyncio.sleep(0)  # the request is out
            await asyncio.sleep(0)  # the answer is on its way back
            return {"key": key, "call": self.calls[key]}

        return call


@dataclass
class Deliveries:
    executed: list[str] = field(default_factory=list)
    replayed: set[str] = field(default_factory=set)
    effect_timed_out: bool = False


async def hidden_prepared(store: DurabilityStore, thread_id: str) -> list[str]:
    """Receipts left ``prepared`` with no holder that operators would not see as uncertain."""
    listed = {
        r.idempotency_key
        for r in await store.list_receipts(status=ReceiptStatus.UNCERTAIN, thread_id=thread_id)
    }
    return [
        f"I5c: receipt {r.idempotency_key} left prepared and not listed as uncertain"
        for r in await store.list_receipts(status=ReceiptStatus.PREPARED, thread_id=thread_id)
        if r.idempotency_key not in listed
    ]


async def check_invariants(
    store: DurabilityStore,
    thread_id: str,
    shape: Shape,
    fault: Fault,
    driver: Driver,
    provider: CountingProvider,
    seen: Deliveries,
    error_a: BaseException | None,
    error_b: BaseException | None,
) -> list[str]:
    problems = list(provider.problems)
    kind = fault.kind
    for who, error in (("A", error_a), ("B", error_b)):
        if error is None or isinstance(error, KernelError):
            continue
        if who == "A" and isinstance(error, asyncio.CancelledError) and kind == "cancel":
            continue
        if who == "A" and isinstance(error, TimeoutError) and kind == "timeout":
            continue
        problems.append(f"I8: delivery {who} ended with {type(error).__name__}")
    if driver.fired and kind == "cancel" and not isinstance(error_a, asyncio.CancelledError):
        problems.append(f"I8: the cancellation was not re-raised ({type(error_a).__name__})")
    if driver.fired and kind == "timeout" and error_a is None:
        problems.append("I8: the turn's timeout expired but the caller was not told")
    if isinstance(error_b, TurnConflictError):
        problems.append(f"I1: the duplicate delivery got {error_b.code}")
    elif error_b is not None and not isinstance(error_b, EffectUncertainError):
        problems.append(f"I9: the duplicate delivery failed with {type(error_b).__name__}")

    stored = await store.get_turn(thread_id, "turn-1")
    by = None
    if stored is not None and isinstance(stored.response, dict):
        by = stored.response.get("by")
    if by == "A" and "B" in seen.executed:
        problems.append("I1: the duplicate delivery ran a committed turn again")
    if by is None and error_b is None:
        problems.append("I4: the duplicate delivery returned but nothing is stored")
    checkpoint = await latest_checkpoint(store, thread_id)
    revision = 0 if checkpoint is None else checkpoint.revision
    if revision != (2 if stored is not None else 1):
        problems.append(f"I3: head revision {revision} after {'a' if stored else 'no'} commit")
    events = await store.read_outbox(thread_id=thread_id, turn_id="turn-1")
    if len(events) != (EVENTS if stored is not None else 0):
        problems.append(f"I4: {len(events)} outbox events for turn-1 (stored: {bool(stored)})")

    uncertain = {
        r.idempotency_key
        for r in await store.list_receipts(status=ReceiptStatus.UNCERTAIN, thread_id=thread_id)
    }
    values = (
        stored.response.get("values", []) if stored and isinstance(stored.response, dict) else []
    )
    for key in KEYS[shape]:
        full_key = effect(key).idempotency_key
        receipt = await store.get_receipt(thread_id, full_key)
        calls = provider.calls[key]
        if calls > 1:
            problems.append(f"I5b: provider called {calls} times for {key}")
        if receipt is None:
            if calls:
                problems.append(f"I5a: provider called for {key} with no receipt")
            continue
        status = receipt.status
        if status is ReceiptStatus.PREPARED and full_key not in uncertain:
            problems.append(f"I5c: receipt {key} left prepared and not listed as uncertain")
        if status is ReceiptStatus.COMPLETED and calls != 1:
            problems.append(f"I5: completed receipt {key} with {calls} provider calls")
        if status is ReceiptStatus.FAILED and calls != 0:
            problems.append(f"I5: failed receipt {key} although the provider was called")
        if kind == "lost_write" and provider.entered[key] == 0 and full_key in uncertain:
            # No operation for this key was ever entered: nothing can have been applied, so
            # reporting it as possibly applied (a lost answer to ``prepared``, say) is false.
            problems.append(
                f"I5: receipt {key} is uncertain although the provider was never called"
            )
        if (
            isinstance(values, list)
            and any(isinstance(v, dict) and v.get("key") == key for v in values)
            and status is not ReceiptStatus.COMPLETED
        ):
            problems.append(f"I4: the stored turn used {key} but its receipt is {status}")
    return problems
