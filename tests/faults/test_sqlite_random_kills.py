"""``kill -9`` at random instants (F2): a worker runs turns with one effect each (one key per
turn) and is killed at a random moment; a fresh worker redelivers every turn. Nothing committed
is lost, no key is called twice, every turn ends committed (or replayed) unless its effect was
interrupted, which it then reports as uncertain, and the checkpoint chain stays linear."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path

import pytest

from intention_kernel.durability.sqlite import SQLiteDurability

from .fault_support import (
    SCALE,
    finish,
    inspect,
    integrity_ok,
    provider_process,
    run_worker,
    start_worker,
)


def test_random_kills_lose_nothing_and_never_call_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "random.db"

    async def create() -> None:
        await (await SQLiteDurability.open(db)).close()

    asyncio.run(create())
    rng = random.Random(int(os.environ.get("IK_FAULT_SEED", "7")))
    rounds, kills, violations = 3 * SCALE, 0, []
    before_kill: list[int] = []
    interrupted = 0
    with provider_process() as provider:
        for n in range(rounds):
            thread = f"t-random-{n}"
            turns = [f"turn-{i}" for i in range(40)]
            spec = {
                "db": str(db),
                "thread": thread,
                "turns": turns,
                "key": "test.call",
                "key_per_turn": True,
                "provider": provider.url,
                "hold": 0.02,
            }
            victim = start_worker(spec)
            time.sleep(rng.uniform(0.5, 1.2))  # start-up takes ~0.3 s, the turns ~1 s
            os.kill(victim.pid, signal.SIGKILL)
            killed = finish(victim)
            kills += killed.killed
            before_kill.append(len(killed.lines))
            again = run_worker(spec)
            outcomes = {line["turn"]: line["outcome"] for line in again.lines}
            state = inspect(db, thread)
            calls = provider.stats()["calls"]
            twice = {k: c for k, c in calls.items() if k.startswith(f"{thread}|") and c > 1}
            if twice:
                violations.append(f"{thread}: I5b keys called twice {twice}")
            uncertain = [t for t in turns if state.receipts.get(f"test.call:{t}") == "uncertain"]
            for turn in turns:
                expected = {"uncertain"} if turn in uncertain else {"committed", "replayed"}
                if outcomes.get(turn) not in expected:
                    violations.append(f"{thread}: {turn} ended {outcomes.get(turn)}")
            interrupted += len(uncertain)
            if state.turns != [t for t in turns if t not in uncertain]:
                violations.append(f"{thread}: I1 committed {state.turns}, uncertain {uncertain}")
            head = (len(state.turns), state.turns[-1]) if state.turns else None
            if state.head != head:
                violations.append(f"{thread}: I3 head {state.head} for {state.turns}")
            if state.outbox != len(state.turns):
                violations.append(f"{thread}: I4 {state.outbox} events for {state.turns}")
        unprepared = provider.stats()["unprepared"]
    violations += [f"I5a provider called without a prepared receipt: {u}" for u in unprepared]
    if not integrity_ok(db):
        violations.append("I8 PRAGMA integrity_check failed")
    with capsys.disabled():
        print(
            f"\nsqlite random kills: rounds={rounds} kills={kills}"
            f" turns done before each kill={before_kill} interrupted effects={interrupted}"
            f" violations={len(violations)}"
        )
    assert kills == rounds
    assert violations == []
