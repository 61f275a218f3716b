"""The pure part of ``bench/sample_profile.py``: sorting py-spy's samples by innermost frame."""

from __future__ import annotations

from bench.sample_profile import category, tally

LOOP = (
    "<module> (profile_turns.py:1);run (asyncio/runners.py:190);Handle._run (asyncio/events.py:80)"
)


def test_innermost_frames_fall_into_their_categories() -> None:
    assert category("fetchrow (asyncpg/connection.py:746)") == "asyncpg (driver)"
    assert category("write (asyncio/selector_events.py:1057)") == "asyncio and sockets"
    assert category("stored_json (intention_kernel/contracts/codec.py:405)") == (
        "models, codec, ids"
    )
    assert category("run (intention_kernel/durability/postgres/_lanes.py:63)") == (
        "the store's own lines"
    )
    assert category("result_for (bench/_payloads.py:55)") == "the benchmark's operation"
    assert category("__aenter__ (contextlib.py:205)") == "other standard library"


def test_only_samples_taken_while_the_loop_ran_a_callback_count() -> None:
    raw = "\n".join(
        [
            f"{LOOP};fetchrow (asyncpg/connection.py:746) 3",
            f"{LOOP};encode_model (intention_kernel/durability/_documents.py:112) 1",
            "<module> (profile_turns.py:1);_find_and_load (<frozen importlib>:1) 50",
            "",
            "not a sample line",
        ]
    )
    kinds, frames, total = tally(raw)
    assert total == 4  # the import at start-up is left out
    assert kinds == {"asyncpg (driver)": 3, "models, codec, ids": 1}
    assert frames["fetchrow (asyncpg/connection.py:746)"] == 3
