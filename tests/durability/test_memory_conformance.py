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


class TestMemoryConformance(DurabilityConformance):
    @pytest.fixture
    def harness(self) -> MemoryHarness:
        return MemoryHarness()
