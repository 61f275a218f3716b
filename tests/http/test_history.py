"""``GET .../turns``: a button press shows what was chosen, the question and who answered.

On every store (memory, SQLite, PostgreSQL), over a real server: the travel desk is asked to
book, the user presses "yes" (no text), and the history shows that turn as
``accepted: Please confirm: ...`` with the principal as the approval actor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from intention_kernel.contracts import DurabilityStore
from intention_kernel.testing import MemoryDurability

from .conftest import StoreFactory, _postgres, _sqlite
from .support import Live, app_for, bearer, make_desk, serve, to_confirmation


async def _memory_store(tmp_path: Path) -> DurabilityStore:
    return MemoryDurability()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def any_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[DurabilityStore]:
    if request.param == "memory":
        memory = MemoryDurability()
        try:
            yield memory
        finally:
            await memory.close()
        return
    factory: StoreFactory = _sqlite if request.param == "sqlite" else _postgres
    async with factory(tmp_path) as opened:
        yield opened


async def test_a_selection_turn_shows_the_choice_and_the_approval_actor(
    any_store: DurabilityStore,
) -> None:
    async with serve(app_for(make_desk(any_store))) as live:
        await _press_yes_then_read(live)


async def _press_yes_then_read(live: Live) -> None:
    interaction = await to_confirmation(live, "t-1")
    press = {"text": "", "selection": {"interaction_id": interaction["id"], "option": "yes"}}
    answer = await live.post("t-1", "k-yes", press)
    assert answer.status_code == 200, answer.text
    assert "Booked" in answer.json()["response"]["text"]

    history = await live.client.get("/v1/threads/t-1/turns", headers=bearer())
    assert history.status_code == 200, history.text
    turns = history.json()["turns"]
    assert [t["turn_id"] for t in turns] == ["k-search", "k-quote", "k-book", "k-yes"]
    pressed = turns[-1]
    assert pressed["input"] == f"accepted: {interaction['prompt']}"
    assert [t["answer"] for t in turns[:3]] == [None, None, None]
    assert interaction["prompt"].startswith("Please confirm: Book the quoted stay (quote_id: ")
    assert {k: pressed["answer"][k] for k in ("decision", "option", "via", "actor")} == {
        "decision": "accepted",
        "option": "yes",
        "via": "selection",
        "actor": "alice",  # the principal who pressed it
    }
    assert pressed["answer"]["question"] == interaction["prompt"]
    assert pressed["answer"]["interaction_id"] == interaction["id"]
    assert "digest" not in pressed["answer"]
