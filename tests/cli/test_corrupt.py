"""One corrupt thread stays one thread's problem for the operator too: ``threads`` marks it and
carries on, ``status`` counts it."""

from __future__ import annotations

import sqlite3

import pytest

from .conftest import Seeded
from .support import cli, cli_json


@pytest.mark.parametrize("empty", ["sqlite"], indirect=True)
def test_a_corrupt_head_is_listed_and_counted(seeded: Seeded) -> None:
    assert seeded.path is not None
    with sqlite3.connect(seeded.path) as conn:
        [(thread,)] = conn.execute("SELECT MIN(thread_id) FROM ik_turns").fetchall()
        conn.execute("UPDATE ik_turns SET result = '{not json' WHERE thread_id = ?", (thread,))
    listed = cli_json("threads", "--store", seeded.store)["threads"]
    assert [t["thread_id"] for t in listed if t["corrupt"]] == [thread]
    assert len(listed) > 1  # the other threads are still listed
    assert cli_json("status", "--store", seeded.store)["corrupt_threads"] == 1
    human = cli("threads", "--store", seeded.store)
    assert human.exit_code == 0 and "(corrupt)" in human.stdout
