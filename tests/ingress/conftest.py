"""The ingress tests' agent: the echo agent on a SQLite file of the test's own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from intention_kernel.durability import open_durability
from intention_kernel.kernel import CompiledAgent

from .agent import echo_agent


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[CompiledAgent]:
    store = await open_durability(f"sqlite:///{tmp_path / 'ingress.db'}")
    try:
        yield echo_agent(store)
    finally:
        await store.close()
