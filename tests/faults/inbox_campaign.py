"""The inbox kill campaign's run: submit a plan, run workers, ``kill -9`` them, settle, check.

``campaign(target, kills=...)`` submits every turn up front through the inbox, starts
``WORKERS`` worker processes (``inbox_worker``), and kills a random one at random moments
(``KILL_GAP``), starting a replacement each time, until ``kills`` kills. Then it waits until
every request is done or dead (``SETTLE``), drains the workers with SIGTERM and checks
(``inbox_checks``). Nothing is ever resubmitted or rerun by the campaign: a dead worker's
expired claim, taken by another worker, is the only retry.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from intention_kernel.durability.factory import open_durability

from . import inbox_worker
from .inbox_checks import Planned, check
from .kit import Report, read_log, reporting

__all__ = ["Planned", "Target", "campaign", "plan"]

SEED = int(os.environ.get("IK_FAULT_SEED", "11"))
THREADS = 12
"""Threads at least; more when the plan is long (``TURNS_PER_THREAD``)."""
TURNS_PER_THREAD = 100
"""About this many turns per thread: a thread's checkpoint grows with its turns."""
WORKERS = 3
"""Worker processes alive at any time, each running up to ``CONCURRENCY`` turns at once."""
CONCURRENCY = 4
CLAIM_TTL = 1.0
"""Seconds a claim lasts unless renewed: a killed worker's requests are claimed after it."""
KILL_GAP = (0.1, 0.45)
"""Seconds between two kills, drawn uniformly."""
TURNS_PER_KILL = 20
"""Turns planned per kill: enough work that the kills land while turns run."""
LATENCY = 0.05
"""Up to this many seconds of network time before and after each provider call."""
SETTLE = 120.0
"""Seconds the workers get to finish after the last kill (I9)."""
WORKER_SETTINGS: dict[str, Any] = {
    "concurrency": CONCURRENCY,
    "claim_ttl": CLAIM_TTL,
    "poll_interval": 0.1,
    "max_attempts": 100,
    "backoff": 0.05,
    "max_backoff": 0.5,
    "turn_timeout": 60.0,
    "grace": 10.0,
}


def plan(rng: random.Random, threads: int, turns: int) -> list[Planned]:
    """``threads`` threads of ``turns`` or ``turns + 1`` turns: look-ups (no write), and
    proposals each followed by its ``yes`` (1 or 2 writes); interleaved across threads in
    submission order."""
    lanes: list[list[Planned]] = []
    for t in range(threads):
        thread = f"th-{t:02d}"
        lane: list[Planned] = []
        while len(lane) < turns:
            order = f"{thread}-o{len(lane)}"
            writes = rng.choice((0, 1, 2))
            if writes == 0:
                lane.append(Planned(thread, f"u{len(lane):04d}", f"look up order {order}"))
                continue
            text = f"pay order {order} in {writes} writes"
            lane.append(Planned(thread, f"u{len(lane):04d}", text, order))
            lane.append(Planned(thread, f"u{len(lane):04d}", "yes", order, writes))
        lanes.append(lane)
    ordered: list[Planned] = []
    for i in range(max(len(lane) for lane in lanes)):
        ordered.extend(lane[i] for lane in lanes if i < len(lane))
    return ordered


@dataclass
class Target:
    """A store under test: its URL and adapter options, and the provider process."""

    name: str
    url: str
    options: dict[str, Any]
    provider: dict[str, Any]
    """What workers call (``inbox_worker.Provider``)."""
    stats: Callable[[], dict[str, Any]]
    """The provider process's counts: ``{"calls": {"thread<sep>key": n}, "unprepared": []}``."""
    db: Path | None = None
    """The SQLite file (for ``integrity_check``)."""
    planted: str | None = None
    """A planted bug the workers run with (``IK_PLANTED_BUG``)."""


@dataclass
class Workers:
    """The live worker processes, the kills (pid -> monotonic time just before the signal)."""

    spec: dict[str, Any]
    rng: random.Random
    live: list[BaseProcess] = field(default_factory=list)
    kills: dict[int, float] = field(default_factory=dict)
    started: int = 0

    def start(self) -> None:
        self.live.append(inbox_worker.start(self.spec))
        self.started += 1

    def reap(self, report: Report) -> None:
        """A worker that ended without our kill is an I8 violation (and is replaced)."""
        for process in list(self.live):
            if process.exitcode is not None:
                report.add("I8", f"worker {process.pid} exited by itself ({process.exitcode})")
                self.live.remove(process)
                self.start()

    def kill_one(self) -> None:
        victim = self.rng.choice(self.live)
        assert victim.pid is not None
        self.kills[victim.pid] = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(10)
        self.live.remove(victim)
        self.start()

    def drain(self, report: Report) -> None:
        """SIGTERM: each worker claims nothing more, finishes what runs and exits 0."""
        for process in self.live:
            if process.pid is not None and process.exitcode is None:
                os.kill(process.pid, signal.SIGTERM)
        for process in self.live:
            process.join(30)
            if process.exitcode is None:
                report.add("I9", f"worker {process.pid} did not drain within 30 s")
            elif process.exitcode != 0:
                report.add("I8", f"worker {process.pid} drained with exit code {process.exitcode}")

    def close(self) -> None:
        for process in self.live:
            if process.exitcode is None:
                process.kill()
            process.join(10)
        self.live.clear()


@dataclass
class SubmittingWorkers(Workers):
    """Workers that also submit: slot ``i``'s process submits its threads' requests in plan
    order, so its own worker is handed them while it has a free slot (the submit is the
    claim, and on PostgreSQL takes the lease). A killed slot's replacement submits its list
    again from the start: a submit is idempotent, and what committed is answered as done."""

    lists: list[list[list[str]]] = field(default_factory=list)
    slots: dict[int, int] = field(default_factory=dict)
    """pid -> slot."""

    def start_slot(self, slot: int) -> None:
        process = inbox_worker.start({**self.spec, "slot": slot, "submit": self.lists[slot]})
        assert process.pid is not None
        self.live.append(process)
        self.slots[process.pid] = slot
        self.started += 1

    def start(self) -> None:
        self.start_slot(len(self.slots) % len(self.lists))

    def reap(self, report: Report) -> None:
        for process in list(self.live):
            if process.exitcode is not None:
                report.add("I8", f"worker {process.pid} exited by itself ({process.exitcode})")
                self.live.remove(process)
                self.start_slot(self.slots[process.pid or 0])

    def kill_one(self) -> None:
        victim = self.rng.choice(self.live)
        assert victim.pid is not None
        self.kills[victim.pid] = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(10)
        self.live.remove(victim)
        self.start_slot(self.slots[victim.pid])


def _slot_lists(planned: list[Planned], slots: int) -> list[list[list[str]]]:
    """The plan split by thread over ``slots`` submitters, each list in plan order."""
    threads = sorted({p.thread for p in planned})
    owner = {thread: i % slots for i, thread in enumerate(threads)}
    lists: list[list[list[str]]] = [[] for _ in range(slots)]
    for p in planned:
        lists[owner[p.thread]].append([p.thread, p.turn, p.text])
    return lists


def campaign(target: Target, *, kills: int, seed: int = SEED, submitting: bool = False) -> Report:
    """Run the campaign with ``kills`` kills; the report (printed) holds figures and
    violations. ``submitting``: the workers submit the plan themselves (``SubmittingWorkers``)
    instead of it being submitted up front, so turns are handed to them and kills land
    between a submit that claimed and the turn's commit too."""
    name = f"inbox-kill-{target.name}" + (f"-{target.planted}" if target.planted else "")
    name += "-submitting" if submitting else ""
    with reporting(Report(name)) as report, tempfile.TemporaryDirectory(prefix="ik-inbox-") as logs:
        _run(report, target, kills, seed, logs, submitting)
    return report


def _run(
    report: Report, target: Target, kills: int, seed: int, logs: str, submitting: bool
) -> None:
    rng = random.Random(f"{seed}-{target.name}")
    turns = kills * TURNS_PER_KILL
    threads = max(THREADS, math.ceil(turns / TURNS_PER_THREAD))
    planned = plan(rng, threads, math.ceil(turns / threads))
    log = os.path.join(logs, "log.jsonl")
    spec = {
        "url": target.url,
        "options": target.options,
        "provider": {**target.provider, "latency": LATENCY},
        "log": log,
        "env": {"IK_PLANTED_BUG": target.planted} if target.planted else {},
        "worker": WORKER_SETTINGS,
    }
    began = time.monotonic()
    workers: Workers
    if submitting:
        workers = SubmittingWorkers(spec, rng, lists=_slot_lists(planned, WORKERS))
    else:
        asyncio.run(_submit(target, planned))
        workers = Workers(spec, rng)
    submitted = time.monotonic()

    def unfinished() -> int:
        """Open requests, or the whole plan while a slot has not submitted all of its own."""
        done = {r["slot"] for r in read_log(log) if r["ev"] == "submitted"}
        if submitting and len(done) < WORKERS:
            return len(planned)
        return asyncio.run(_open_requests(target))

    try:
        killed, settled = kill_then_settle(
            report, workers, rng, kills=kills, total=len(planned), since=submitted, left=unfinished
        )
    finally:
        workers.close()
    drained = time.monotonic()
    asyncio.run(
        check(
            report,
            url=target.url,
            options=target.options,
            db=target.db,
            planned=planned,
            records=read_log(log),
            kills=workers.kills,
            provider=target.stats(),
        )
    )
    report.runs = workers.started
    report.injections["kill -9"] = len(workers.kills)
    if submitting:
        report.figures["handed_over"] = sum(1 for r in read_log(log) if r["ev"] == "handed")
    report.figures.update(
        {
            "turns": len(planned),
            "threads": threads,
            "workers_started": workers.started,
            "seconds_submitting": round(submitted - began, 1),
            "seconds_killing": round(killed - submitted, 1),
            "seconds_settling": round(settled - killed, 1),
            "seconds_draining": round(drained - settled, 1),
            "seconds_checking": round(time.monotonic() - drained, 1),
            "seconds_total": round(time.monotonic() - began, 1),
        }
    )


def kill_then_settle(
    report: Report,
    workers: Workers,
    rng: random.Random,
    *,
    kills: int,
    total: int,
    since: float,
    left: Callable[[], int],
) -> tuple[float, float]:
    """Start ``WORKERS`` workers, ``kill -9`` one at random moments (a replacement each time)
    until ``kills`` kills or no work is ``left()`` (of ``total``, started at ``since``), let
    them finish what is left (I9 past ``SETTLE``) and drain them; the monotonic times the kills
    and the settling ended."""
    for _ in range(WORKERS):
        workers.start()
    open_, looked = total, time.monotonic()
    while len(workers.kills) < kills and open_:
        to_go = kills - len(workers.kills)
        time.sleep(_gap(rng, total - open_, open_, time.monotonic() - since, to_go))
        workers.reap(report)
        workers.kill_one()
        if time.monotonic() - looked > 1.0:
            open_, looked = left(), time.monotonic()
    killed = time.monotonic()
    report.figures["requests_open_after_the_kills"] = open_
    deadline = killed + SETTLE
    while (open_ := left()) and time.monotonic() < deadline:
        workers.reap(report)
        time.sleep(0.2)
    settled = time.monotonic()
    if open_:
        report.add("I9", f"{open_} requests still open {SETTLE:.0f} s after the last kill")
    workers.drain(report)
    return killed, settled


def _gap(rng: random.Random, finished: int, left: int, seconds: float, kills: int) -> float:
    """Seconds to the next kill: drawn from ``KILL_GAP``, shorter when the work left (at the
    pace so far) would end before the kills left at that gap."""
    gap = rng.uniform(*KILL_GAP)
    if finished and kills:
        gap = min(gap, 0.8 * left * seconds / finished / kills)
    return max(gap, 0.02)


async def _submit(target: Target, planned: list[Planned]) -> None:
    store = await open_durability(target.url, **target.options)
    try:
        agent = inbox_worker.build_agent(store)
        for p in planned:
            await agent.submit(thread_id=p.thread, turn_id=p.turn, text=p.text)
    finally:
        await store.close()


async def _open_requests(target: Target) -> int:
    store = await open_durability(target.url, **target.options)
    try:
        stats = await store.inbox.stats()  # type: ignore[attr-defined]
        return int(stats.pending + stats.running)
    finally:
        await store.close()
