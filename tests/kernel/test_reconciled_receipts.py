"""A reconciled receipt reaches the checkpoint's copy (and the user) on the next turn.

At the start of each turn the kernel reads, through ``TurnScope.receipts``, the ledger's receipts
for exactly the keys its checkpoint holds as uncertain: none when nothing is uncertain.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import (
    DurabilityStore,
    EffectReceipt,
    ErrorCode,
    ReceiptStatus,
    UsageError,
)
from intention_kernel.kernel import Kernel
from intention_kernel.testing.conformance import turn_storage

from .support import support_agent
from .writes import CHARGE, REFUND, Payments, accept, payments_world

KEY = "payments.charge:order:42"
VERIFIED = "Update: Charge the customer for an order: it went through after all (verified)."
NOT_THROUGH = (
    "Update: Charge the customer for an order: it did not go through and nothing was changed; "
    "you can ask me to try again."
)


def count_reads(monkeypatch: pytest.MonkeyPatch, durability: DurabilityStore) -> list[str]:
    """Wrap the adapter's receipt read (``TurnStorage.get_receipt``, what
    ``TurnScope.receipts`` uses); returns the log."""
    reads: list[str] = []
    turns = turn_storage(durability)
    original = turns.get_receipt

    async def counting(thread_id: str, idempotency_key: str) -> EffectReceipt | None:
        reads.append(idempotency_key)
        receipt: EffectReceipt | None = await original(thread_id, idempotency_key)
        return receipt

    monkeypatch.setattr(turns, "get_receipt", counting)
    return reads


class _CountingScope:
    """Delegates to the adapter's scope and logs every ``receipts`` read through the protocol."""

    def __init__(self, inner: Any, reads: list[str]) -> None:
        self._inner = inner
        self._reads = reads

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def receipts(self, idempotency_keys: Sequence[str]) -> list[EffectReceipt]:
        self._reads.extend(idempotency_keys)
        return list(await self._inner.receipts(idempotency_keys))


class CountingDurability:
    """The store as the kernel sees it, counting the receipt reads its turn scopes make."""

    def __init__(self, inner: DurabilityStore) -> None:
        self.inner = inner
        self.reads: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def with_turn(
        self, thread_id: str, turn_id: str, operation: Callable[[Any], Awaitable[Any]], **kw: Any
    ) -> Any:
        return await self.inner.with_turn(
            thread_id, turn_id, lambda scope: operation(_CountingScope(scope, self.reads)), **kw
        )


async def _uncertain_charge(
    durability: DurabilityStore,
) -> tuple[Any, Payments, CountingDurability]:
    counting = CountingDurability(durability)
    world, payments = payments_world(counting)
    payments.lose_response = 1
    proposed = await world.run("turn-1", "charge 42")
    lost = await world.run("turn-2", "", selection=accept(proposed))
    [receipt] = lost.checkpoint.receipts
    assert receipt.status is ReceiptStatus.UNCERTAIN
    assert counting.reads == []  # nothing was uncertain before turn-2
    return world, payments, counting


async def test_a_receipt_reconciled_as_completed_is_refreshed_on_the_next_unrelated_turn(
    durability: DurabilityStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, payments, counting = await _uncertain_charge(durability)
    reads = count_reads(monkeypatch, durability)  # read-only turns: adapter reads are ours
    still = await world.run("turn-3", "where is order 42?")  # not reconciled yet
    assert still.checkpoint.receipts[0].status is ReceiptStatus.UNCERTAIN
    assert "Update:" not in still.response.text
    assert reads == [KEY] and counting.reads == [KEY]

    value: JsonValue = {"charge_id": "ch-1", "amount": 5}
    await durability.reconcile("t1", KEY, "completed", value=value, note="found", actor="ops")
    nxt = await world.run("turn-4", "where is order 42?")
    [receipt] = nxt.checkpoint.receipts
    assert receipt.status is ReceiptStatus.COMPLETED and receipt.value == value
    assert receipt == await durability.get_receipt("t1", KEY)
    assert nxt.response.text == f"{VERIFIED}\nOrder 42 has shipped."
    outbox = [e.event for e in await durability.read_outbox(thread_id="t1", turn_id="turn-4")]
    [resolved] = [e for e in outbox if e.type == "effect.resolved"]
    assert resolved.category == "audit"
    assert resolved.data == {
        "capability_id": "payments.charge",
        "idempotency_key": KEY,
        "receipt_id": receipt.id,
        "status": "completed",
    }
    stored = await durability.load_checkpoint("t1")
    assert stored is not None and stored.receipts == [receipt]

    # Told once: later turns read nothing and say nothing more about it.
    reads.clear()
    counting.reads.clear()
    later = await world.run("turn-5", "where is order 42?")
    assert later.response.text == "Order 42 has shipped."
    assert later.checkpoint.receipts == [receipt]
    assert reads == [] and counting.reads == []
    # Redelivering the turn that told the user replays it as committed.
    replay = await world.run("turn-4", "where is order 42?")
    assert replay.replayed and replay.response.text == nxt.response.text
    assert payments.calls == [KEY]


async def test_a_receipt_reconciled_as_not_applied_becomes_failed_and_a_retry_runs_once(
    durability: DurabilityStore,
) -> None:
    world, payments, counting = await _uncertain_charge(durability)
    await durability.reconcile("t1", KEY, "not_applied", note="no charge found", actor="ops")
    nxt = await world.run("turn-3", "where is order 42?")
    [receipt] = nxt.checkpoint.receipts
    assert receipt.status is ReceiptStatus.FAILED
    assert NOT_THROUGH in nxt.response.text
    assert counting.reads == [KEY]

    counting.reads.clear()
    await world.run("turn-4", "charge 42")
    done = await world.run("turn-5", "yes")
    assert done.response.text == "Charged 5 EUR for order 42."
    assert payments.calls == [KEY, KEY]  # the retry called the provider once more
    assert done.checkpoint.receipts[-1].status is ReceiptStatus.COMPLETED
    # Once completed, a further attempt replays the stored value without a call.
    await world.run("turn-6", "charge 42")
    again = await world.run("turn-7", "yes")
    assert again.response.text == "Charged 5 EUR for order 42."
    assert payments.calls == [KEY, KEY]
    assert counting.reads == []  # nothing uncertain in the checkpoint: no receipt reads at all


async def test_no_receipt_reads_when_nothing_is_uncertain(
    durability: DurabilityStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = CountingDurability(durability)
    world, payments = payments_world(counting)
    reads = count_reads(monkeypatch, durability)
    await world.run("turn-1", "where is order 42?")
    proposed = await world.run("turn-2", "charge 42")
    assert reads == []
    done = await world.run("turn-3", "", selection=accept(proposed))
    assert done.checkpoint.receipts[0].status is ReceiptStatus.COMPLETED
    reads.clear()  # the memory adapter's ledger uses the same read inside run_effect
    await world.run("turn-4", "where is order 42?")
    assert payments.calls == [KEY]
    assert counting.reads == [] and reads == []


async def test_the_scope_read_returns_current_receipts_in_order_and_skips_unknown_keys(
    durability: DurabilityStore,
) -> None:
    await _uncertain_charge(durability)
    await durability.reconcile("t1", KEY, "not_applied", note="none", actor="ops")
    kept: list[Any] = []

    async def body(scope: Any) -> list[EffectReceipt]:
        kept.append(scope)
        return list(await scope.receipts(["payments.charge:unknown", KEY, KEY]))

    found = await durability.with_turn("t1", "read-1", body)
    assert [r.status for r in found] == [ReceiptStatus.FAILED]
    assert found[0] == await durability.get_receipt("t1", KEY)
    assert await durability.with_turn("t1", "read-2", lambda s: s.receipts([])) == []
    with pytest.raises(UsageError) as info:
        await kept[0].receipts([KEY])
    assert info.value.code == ErrorCode.SCOPE_CLOSED


class _OldScope:
    """A ``TurnScope`` from an adapter written before ``receipts`` existed."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.thread_id = inner.thread_id
        self.turn_id = inner.turn_id
        self.checkpoint = inner.checkpoint
        self.prior_result = inner.prior_result
        self.run_effect = inner.run_effect
        self.commit = inner.commit


class _OldDurability:
    def __init__(self, inner: DurabilityStore) -> None:
        self._inner = inner

    async def with_turn(
        self, thread_id: str, turn_id: str, operation: Callable[[Any], Awaitable[Any]], **kw: Any
    ) -> Any:
        return await self._inner.with_turn(
            thread_id, turn_id, lambda scope: operation(_OldScope(scope)), **kw
        )

    @asynccontextmanager
    async def turn(self, thread_id: str, turn_id: str, **kw: Any) -> AsyncIterator[Any]:
        async with self._inner.turn(thread_id, turn_id, **kw) as scope:
            yield _OldScope(scope)

    async def close(self) -> None:
        await self._inner.close()


async def test_a_scope_without_the_read_keeps_the_copy_until_the_key_is_used_again(
    durability: DurabilityStore,
) -> None:
    world, payments, _ = await _uncertain_charge(durability)
    await durability.reconcile(
        "t1", KEY, "completed", value={"charge_id": "ch-1", "amount": 5}, note="ok", actor="ops"
    )
    kernel = Kernel(
        durability=_OldDurability(durability),
        model=world.gateway,
        ports={"payments": payments, "shop": world.shop},
    )
    agent = kernel.compile(support_agent([CHARGE, REFUND]))
    result = await agent.run(thread_id="t1", turn_id="turn-3", text="where is order 42?")
    assert result.response.text == "Order 42 has shipped."
    assert result.checkpoint.receipts[0].status is ReceiptStatus.UNCERTAIN
