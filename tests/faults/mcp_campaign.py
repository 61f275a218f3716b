"""The MCP kill campaign's run: a real MCP server, inbox workers on its write tool, ``kill -9``.

``notes_server(state)`` starts ``tests/mcp/notes_server.py`` over streamable HTTP on 127.0.0.1
(a port of its own choosing), as one long-lived process that records every execution of a
write, with the ``_meta`` idempotency key it received, in ``executions.jsonl`` (fsynced before
it answers). ``campaign(target, kills=...)`` submits every turn up front through the inbox
(per thread: ``add note T`` then ``yes``, one write per ``yes``), starts the inbox campaign's
``WORKERS`` worker processes (``mcp_worker``), ``kill -9``s a random one at random moments
and starts a replacement, then waits until every request is done or dead, drains the workers
and checks (``mcp_checks``). The run and its bounds are the inbox campaign's
(``inbox_campaign.kill_then_settle``): a dead worker's expired claim, taken by another worker,
is the only redelivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from intention_kernel.durability.factory import open_durability

from . import mcp_worker
from .inbox_campaign import (
    SEED,
    WORKER_SETTINGS,
    Target,
    Workers,
    _open_requests,
    kill_then_settle,
)
from .inbox_checks import Planned
from .kit import Report, read_log, reporting
from .mcp_checks import check, executions

__all__ = ["campaign", "notes_server", "plan"]

SERVER = Path(__file__).resolve().parents[1] / "mcp" / "notes_server.py"
THREADS = 12
TURNS_PER_KILL = 16
"""Turns planned per kill: enough that the kills land while writes run."""
LATENCY = 0.05
"""Up to this many seconds before and after each tool call (the kills land inside it)."""


@contextlib.contextmanager
def notes_server(state: Path) -> Iterator[str]:
    """The notes server over streamable HTTP, for the whole campaign; yields its URL."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--state", str(state), "--http"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())  # said once the socket is bound
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def plan(threads: int, notes: int) -> list[Planned]:
    """``threads`` threads of ``notes`` proposals, each followed by its ``yes`` (one write),
    interleaved across threads in submission order. A note's title names its thread."""
    lanes: list[list[Planned]] = []
    for t in range(threads):
        thread = f"th-{t:02d}"
        lane: list[Planned] = []
        for n in range(notes):
            title = f"{thread}-n{n:03d}"
            lane.append(Planned(thread, f"u{2 * n:04d}", f"add note {title}", title))
            lane.append(Planned(thread, f"u{2 * n + 1:04d}", "yes", title, 1))
        lanes.append(lane)
    return [lane[i] for i in range(max(map(len, lanes))) for lane in lanes if i < len(lane)]


class McpWorkers(Workers):
    """The inbox campaign's workers, running ``mcp_worker`` instead."""

    def start(self) -> None:
        self.live.append(mcp_worker.start(self.spec))
        self.started += 1


def campaign(target: Target, *, kills: int, seed: int = SEED) -> Report:
    """Run the campaign with ``kills`` kills against ``target.provider["mcp"]`` (whose state
    directory is ``target.provider["state"]``); the report (printed) holds figures and
    violations."""
    name = f"mcp-kill-{target.name}" + (f"-{target.planted}" if target.planted else "")
    with reporting(Report(name)) as report, tempfile.TemporaryDirectory(prefix="ik-mcp-") as logs:
        _run(report, target, kills, seed, logs)
    return report


def _run(report: Report, target: Target, kills: int, seed: int, logs: str) -> None:
    rng = random.Random(f"{seed}-mcp-{target.name}")
    turns = kills * TURNS_PER_KILL
    planned = plan(THREADS, math.ceil(turns / THREADS / 2))
    log = os.path.join(logs, "log.jsonl")
    spec: dict[str, Any] = {
        "url": target.url,
        "options": target.options,
        "mcp": target.provider["mcp"],
        "latency": LATENCY,
        "log": log,
        "env": {"IK_PLANTED_BUG": target.planted} if target.planted else {},
        "worker": WORKER_SETTINGS,
    }
    began = time.monotonic()
    asyncio.run(_submit(target, planned))
    submitted = time.monotonic()
    workers = McpWorkers(spec, rng)
    try:
        killed, _ = kill_then_settle(
            report,
            workers,
            rng,
            kills=kills,
            total=len(planned),
            since=submitted,
            left=lambda: asyncio.run(_open_requests(target)),
        )
    finally:
        workers.close()
    settled = time.monotonic()
    asyncio.run(
        check(
            report,
            url=target.url,
            options=target.options,
            db=target.db,
            planned=planned,
            records=read_log(log),
            kills=workers.kills,
            executed=executions(Path(target.provider["state"])),
        )
    )
    report.runs = workers.started
    report.injections["kill -9"] = len(workers.kills)
    report.figures.update(
        {
            "turns": len(planned),
            "writes_planned": sum(p.writes for p in planned),
            "threads": THREADS,
            "workers_started": workers.started,
            "seconds_killing": round(killed - submitted, 1),
            "seconds_settling": round(settled - killed, 1),
            "seconds_total": round(time.monotonic() - began, 1),
        }
    )


async def _submit(target: Target, planned: list[Planned]) -> None:
    store = await open_durability(target.url, **target.options)
    try:
        async with mcp_worker.LoggedServer(target.provider["mcp"], log=None, latency=0) as server:
            agent = await mcp_worker.build_agent(store, server)
            for p in planned:
                await agent.submit(thread_id=p.thread, turn_id=p.turn, text=p.text)
    finally:
        await store.close()
