"""``turns``: a button press shows what was chosen and who answered, on SQLite and PostgreSQL.

The thread is made by real turns of the travel desk: asked to book, the user presses "yes"
(a selection, no text) as ``ann@example.com``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from intention_kernel.examples.travel_desk import compile_desk

from .conftest import Seeded
from .support import cli, cli_json


async def _book_by_button(seeded: Seeded) -> str:
    """Search, quote, ask to book, press "yes"; the question the user was asked."""
    store = await seeded.open()
    try:
        desk = compile_desk(store)
        run: dict[str, Any] = {
            "thread_id": "t-press",
            "host_context": {"actor": "ann@example.com"},
        }
        for n, text in enumerate(
            ("Find a hotel in Lisbon for 2 nights", "How much is Alfama Inn?")
        ):
            await desk.run(turn_id=f"turn-{n + 1}", text=text, **run)
        held = await desk.run(turn_id="turn-3", text="Book it", **run)
        interaction = held.checkpoint.interaction
        assert interaction is not None
        press = {"interaction_id": interaction.id, "option": "yes"}
        done = await desk.run(turn_id="turn-4", text="", selection=press, **run)
        assert "Booked" in done.response.text
        return interaction.prompt
    finally:
        await store.close()


def test_turns_show_a_button_press_and_its_approval_actor(empty: Seeded) -> None:
    question = asyncio.run(_book_by_button(empty))
    assert question.startswith("Please confirm: Book the quoted stay (quote_id: ")
    data = cli_json("turns", "t-press", "--store", empty.store)
    turns = {t["turn_id"]: t for t in data["turns"]}
    pressed = turns["turn-4"]
    assert pressed["input"] == f"accepted: {question}"
    assert turns["turn-3"]["input"] == "Book it" and turns["turn-3"]["answer"] is None
    answer = pressed["answer"]
    assert (answer["decision"], answer["option"], answer["via"], answer["actor"]) == (
        "accepted",
        "yes",
        "selection",
        "ann@example.com",
    )
    assert answer["question"] == question

    human = cli("turns", "t-press", "--store", empty.store, env={"COLUMNS": "400"})
    assert human.exit_code == 0, human.stdout
    [row] = [line for line in human.stdout.splitlines() if "turn-4" in line]
    assert "accepted: Please confirm: Book the quoted stay" in row
    assert "(by ann@example.com)" in row
    assert " - " not in row.replace("turn-4", "")
