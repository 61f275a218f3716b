"""``agent.run`` cancelled, or timed out, at every ``await`` of the pipeline.

The turn under test accepts a held confirmation and so runs a write (the charge). After each
interruption the caller does what the docs say: deliver the same turn id again. Whatever the
position: the provider is called at most once, a committed turn is replayed, and a charge that
happened is never reported as failed.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

from intention_kernel.contracts import DurabilityStore, KernelError, ReceiptStatus
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing import MemoryDurability
from intention_kernel.testing.conformance._explorer import interrupt

from .support import make_world, support_agent
from .writes import CHARGE, REFUND, accept, payments_world

KEY = "payments.charge:order:42"


def other_worker(durability: DurabilityStore) -> DurabilityStore:
    """A second adapter instance over the same storage, as another worker process has."""
    if isinstance(durability, MemoryDurability):
        return MemoryDurability(durability.store)
    if isinstance(durability, SQLiteDurability):
        return SQLiteDurability(durability.path)
    from intention_kernel.durability.postgres import PostgresDurability

    assert isinstance(durability, PostgresDurability)
    return PostgresDurability(durability.pool, schema=durability.schema)


@pytest.mark.parametrize("kind", ["cancel", "timeout"])
async def test_confirmed_write_interrupted_at_every_await(
    durability: DurabilityStore, kind: Literal["cancel", "timeout"]
) -> None:
    violations: list[str] = []
    fired = 0
    retry_store = other_worker(durability)
    for at in range(1, 500):
        world, payments = payments_world(durability)
        retry_world = make_world(
            retry_store, agent=support_agent([CHARGE, REFUND]), ports={"payments": payments}
        )
        thread = f"{kind}-{at}"
        held = await world.run("turn-1", "charge 42", thread_id=thread)
        selection = accept(held)
        hit, _, error = await interrupt(
            world.run("turn-2", "", thread_id=thread, selection=selection), at=at, kind=kind
        )
        if not hit:
            break
        fired += 1
        expected = asyncio.CancelledError if kind == "cancel" else TimeoutError
        if not isinstance(error, expected | KernelError | None):
            violations.append(f"{at}: the caller got {type(error).__name__}")
        try:  # the caller delivers the same turn again, through another worker
            again = await retry_world.run("turn-2", "", thread_id=thread, selection=selection)
        except KernelError as exc:
            violations.append(f"{at}: the redelivery failed with {exc.code}")
            continue
        stored = await durability.get_turn(thread, "turn-2")
        if stored is None or (not again.replayed and stored.trace_id != again.trace_id):
            violations.append(f"{at}: a committed turn ran again (replayed={again.replayed})")
        if len(payments.calls) > 1:
            violations.append(f"{at}: the provider was called {len(payments.calls)} times")
        statuses = {s.status for s in again.response.steps if s.capability_id == "payments.charge"}
        if payments.charges and statuses & {"failed", "skipped"}:
            violations.append(f"{at}: charged, but the answer says {statuses}")
        receipt = await durability.get_receipt(thread, KEY)
        if payments.charges and (receipt is None or receipt.status is ReceiptStatus.FAILED):
            violations.append(f"{at}: charged, but the receipt is {receipt}")
    await retry_store.close()
    assert fired >= 5, "the pipeline has more await points than that"
    assert violations == [], "\n".join(violations[:20])
