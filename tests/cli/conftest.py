"""A real SQLite store with a finished thread, a waiting thread and an uncertain write."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support import Provider, commit_turn, open_sqlite, uncertain_turn


@dataclass
class Seeded:
    path: Path
    provider: Provider

    @property
    def store(self) -> str:
        return str(self.path)


async def _seed(path: Path, provider: Provider) -> None:
    store = await open_sqlite(path)
    try:
        await commit_turn(store, "t-ok", "turn-1", text="charge me", charge=("o-1", provider))
        await commit_turn(store, "t-ok", "turn-2", text="thanks", events=2)
        await commit_turn(store, "t-wait", "turn-1", text="refund", interaction=True)
        await uncertain_turn(store, "t-unc", "turn-1", "o-9", provider)
    finally:
        await store.close()


@pytest.fixture
def seeded(tmp_path: Path) -> Seeded:
    provider = Provider()
    path = tmp_path / "store.db"
    asyncio.run(_seed(path, provider))
    return Seeded(path, provider)
