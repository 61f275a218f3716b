from __future__ import annotations

import pytest

from intention_kernel.testing.conformance import DurabilityConformance
from intention_kernel.testing.postgres import PostgresHarness


class TestPostgresConformance(DurabilityConformance):
    @pytest.fixture
    def harness(self, dsn: str) -> PostgresHarness:
        return PostgresHarness(dsn)
