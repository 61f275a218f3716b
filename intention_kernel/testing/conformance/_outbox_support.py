"""What the outbox suites share: the store they need, its harness, committing events."""

from __future__ import annotations

from typing import Protocol

from ...contracts.durability import DurabilityStore, TurnScope
from ...contracts.outbox import OutboxSource
from ._harness import StoreHarness, harness_test
from ._support import make_events, make_result

__all__ = ["OutboxHarness", "OutboxStore", "commit_events", "outbox_test"]


class OutboxStore(DurabilityStore, OutboxSource, Protocol):
    """A durable store that relays can read its outbox from."""


class OutboxHarness(StoreHarness[OutboxStore]):
    """Opens stores over one test's storage; calling ``open()`` again models a restart."""

    claim_ttl: float = 0.4
    """A short claim lease (seconds) the expiry tests wait out."""

    random_programs: int = 3
    """How many seeded random operation sequences the claim-rule test runs."""


outbox_test = harness_test("outbox_harness")
"""Run an ``async`` test body in a fresh event loop and close what it opened."""


async def commit_events(store: DurabilityStore, thread_id: str, turn_id: str, count: int) -> None:
    """Commit one turn of ``thread_id`` with ``count`` outbox events (sequence 0..count-1)."""

    async def operation(scope: TurnScope) -> None:
        await scope.commit(make_result(scope), make_events(scope, count))

    await store.with_turn(thread_id, turn_id, operation)
