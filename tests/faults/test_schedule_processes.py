"""Schedulers in separate processes on one store: one committed turn per occurrence.

A schedule fires every second. Worker processes (``schedule_worker``: ``agent.worker`` with the
scheduler, a 1 s claim) run on one store, 3 on PostgreSQL and 2 on one SQLite file; one of
them is killed with ``kill -9`` at a random moment. Afterwards: every second from the first
occurrence to the last has exactly one request, done, and one committed turn (none lost to the
kill, none twice), and nothing else ran.

The missed policies: one scheduler on SQLite with a 1.5 s grace, killed, restarted after a
few seconds. ``skip``: the occurrences of the gap never run, and each of them was at least
the grace late when the scheduler came back; ``catch_up_one``: of them exactly the latest runs,
marked as a catch-up in its host context.

CI runs 12 s per store; the README's fault command (``IK_FAULT_SCALE`` of 5 or more) a minute.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest

from intention_kernel.contracts.inbox import InboxRequest, InboxStats, MissedRuns, RequestState
from intention_kernel.durability.factory import open_durability

from .kit import fault_scale
from .schedule_worker import start

SECONDS = 12.0
"""How long the schedulers run in CI (``IK_FAULT_SCALE`` multiplies it)."""
WORKER: dict[str, Any] = {"claim_ttl": 1.0, "poll_interval": 0.1, "backoff": 0.1, "grace": 5.0}


def _spec(url: str, **schedule: Any) -> dict[str, Any]:
    every_second = {"id": "tick", "cron": "* * * * * *", "thread_id": "ops", "text": "tick"}
    return {"url": url, "schedule": {**every_second, **schedule}, "worker": WORKER}


def _occurrence(request: InboxRequest) -> datetime:
    return datetime.fromisoformat(request.turn_id.split("@")[1].replace("Z", "+00:00"))


def _stop(processes: Sequence[BaseProcess]) -> None:
    for process in processes:
        if process.is_alive():
            os.kill(process.pid or 0, signal.SIGTERM)
    for process in processes:
        process.join(20)
        assert process.exitcode in (0, -signal.SIGKILL), process.exitcode


async def _finish_and_read(url: str) -> tuple[list[InboxRequest], dict[str, int], Any]:
    """Run a worker without scheduler until no request is open, then read the requests, the
    committed turns of ``ops`` (per turn id) and the schedule row."""
    from .schedule_worker import build

    store: Any = await open_durability(url)
    try:
        agent = build(store, _spec(url)["schedule"])
        worker = agent.worker(**{**WORKER, "schedules": False})
        task = asyncio.create_task(worker.run())
        async with asyncio.timeout(30):
            while _open(await store.inbox.stats()):  # noqa: ASYNC110 - polls the store
                await asyncio.sleep(0.1)
        worker.stop()
        await asyncio.wait_for(task, 10)
        found = await store.inbox.list_requests(thread_id="ops", limit=1000)
        committed: dict[str, int] = {}
        for turn in await store.list_turns("ops", limit=1000):
            committed[turn.turn_id] = committed.get(turn.turn_id, 0) + 1
        (row,) = await store.schedules.list_schedules()
        return sorted(found, key=_occurrence), committed, row
    finally:
        await store.close()


def _open(stats: InboxStats) -> int:
    return stats.pending + stats.running


def _every_second_once(requests: list[InboxRequest], committed: dict[str, int]) -> None:
    times = [_occurrence(r) for r in requests]
    assert len(times) >= 3
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(times))
    assert {r.state for r in requests} == {RequestState.DONE}
    assert committed == {r.turn_id: 1 for r in requests}


def _run_with_a_kill(url: str, schedulers: int, seed: int) -> datetime:
    """Run the schedulers, kill the first one at a random moment; when they were stopped."""
    rng = random.Random(seed)
    seconds = SECONDS * min(fault_scale(), 5)
    processes = [start(_spec(url)) for _ in range(schedulers)]
    try:
        kill_at = rng.uniform(seconds / 4, seconds * 3 / 4)
        time.sleep(kill_at)
        os.kill(processes[0].pid or 0, signal.SIGKILL)  # the first to start
        time.sleep(seconds - kill_at)
        return datetime.now().astimezone()
    finally:
        _stop(processes)


def _no_occurrence_lost(url: str, schedulers: int, seed: int) -> None:
    """Run the schedulers with a kill; every second from the first start to the stop ran once."""
    began = datetime.now().astimezone()
    stopped = _run_with_a_kill(url, schedulers, seed)
    requests, committed, row = asyncio.run(_finish_and_read(url))
    _every_second_once(requests, committed)
    assert _occurrence(requests[0]) - began < timedelta(seconds=5)  # from the first start
    assert stopped - _occurrence(requests[-1]) < timedelta(seconds=4)  # to the end
    assert row.last_occurrence == _occurrence(requests[-1])


SEED = int(os.environ.get("IK_FAULT_SEED", "7"))


def test_three_schedulers_on_postgres_one_killed_lose_no_occurrence(dsn: str, schema: str) -> None:
    _no_occurrence_lost(f"{dsn}?schema={schema}", 3, SEED)


def test_two_schedulers_on_sqlite_one_killed_lose_no_occurrence(tmp_path: Path) -> None:
    _no_occurrence_lost(f"sqlite:///{tmp_path / 'scheduled.db'}", 2, SEED)


GRACE = 1.5
CLOCKS = timedelta(seconds=0.05)
"""How far the store's clock (a submit's ``submitted_at``) may be behind a scheduler's: one
machine's wall clock read by two processes."""


@pytest.mark.parametrize("missed", list(MissedRuns))
def test_a_scheduler_killed_and_back_applies_its_missed_policy(
    tmp_path: Path, missed: MissedRuns
) -> None:
    url = f"sqlite:///{tmp_path / 'missed.db'}"
    spec = _spec(url, missed=str(missed), grace=GRACE)
    first = start(spec)
    time.sleep(3.0)
    os.kill(first.pid or 0, signal.SIGKILL)
    first.join(10)
    killed = datetime.now().astimezone()
    time.sleep(4.0)
    second = start(spec)
    time.sleep(3.0)
    _stop([second])
    requests, committed, row = asyncio.run(_finish_and_read(url))
    assert {r.state for r in requests} == {RequestState.DONE}
    assert committed == {r.turn_id: 1 for r in requests}
    times = [_occurrence(r) for r in requests]
    gaps = [(a, b) for a, b in itertools.pairwise(times) if b - a > timedelta(seconds=1)]
    assert len(gaps) == 1, times  # the downtime, and only it
    before, after = gaps[0]
    absent = [before + timedelta(seconds=n) for n in range(1, (after - before).seconds)]
    assert absent and absent[0] <= killed + timedelta(seconds=1)  # the next one after the kill
    # The restarted scheduler registered (``seen_at``), then ticked, then submitted the first
    # request after the gap: its tick's clock lies between the two.
    back = row.seen_at
    first_after = next(r for r in requests if _occurrence(r) == after)
    ticked_by = first_after.submitted_at + CLOCKS
    # Every occurrence of the gap was at least the grace late at that tick.
    assert absent[-1] <= ticked_by - timedelta(seconds=GRACE)
    caught = [r for r in requests if r.host_context and r.host_context["catch_up"]]
    if missed is MissedRuns.SKIP:
        assert caught == []
        assert after > back - timedelta(seconds=GRACE)  # on time: less than the grace late
    else:
        # The latest missed occurrence ran once, and it is the first after the gap.
        assert [_occurrence(r) for r in caught] == [after]
        assert after <= ticked_by - timedelta(seconds=GRACE)
