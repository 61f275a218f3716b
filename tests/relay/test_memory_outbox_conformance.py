from __future__ import annotations

import pytest

from intention_kernel.testing import MemoryDurability, MemoryStore
from intention_kernel.testing.conformance.outbox import (
    OutboxHarness,
    OutboxSourceConformance,
    OutboxStore,
)


class MemoryOutboxHarness(OutboxHarness):
    claim_ttl = 0.2

    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()

    async def _open(self) -> OutboxStore:
        return MemoryDurability(self.store)


class TestMemoryOutbox(OutboxSourceConformance):
    @pytest.fixture
    def outbox_harness(self) -> MemoryOutboxHarness:
        return MemoryOutboxHarness()
