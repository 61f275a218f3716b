from __future__ import annotations

import pytest

from intention_kernel.contracts import DurabilityStore
from intention_kernel.testing import MemoryDurability, MemoryStore
from intention_kernel.testing.conformance import ConformanceHarness, DurabilityConformance


class MemoryHarness(ConformanceHarness):
    stateful_examples = 150

    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()

    async def _open(self, *, lock_timeout: float) -> DurabilityStore:
        return MemoryDurability(self.store, lock_timeout=lock_timeout)

    async def revoke_lease(self, thread_id: str) -> None:
        epochs = self.store.epochs
        epochs[thread_id] = epochs.get(thread_id, 0) + 1

    async def corrupt_turn(self, thread_id: str, turn_id: str, text: str) -> None:
        self.store.turns[(thread_id, turn_id)].result_json = text

    async def corrupt_receipt(self, thread_id: str, idempotency_key: str, text: str) -> None:
        self.store.receipts[(thread_id, idempotency_key)] = text

    async def corrupt_event(self, position: int, text: str) -> None:
        self.store.outbox[position - 1] = text


class TestMemoryConformance(DurabilityConformance):
    @pytest.fixture
    def harness(self) -> MemoryHarness:
        return MemoryHarness()
