"""``worker``: run an agent's submitted turns from the store's inbox until SIGTERM or SIGINT.

Why it drains instead of stopping at once: a deploy stops workers with SIGTERM, and a turn that
is cancelled halfway runs again from its last commit. So the first signal stops claiming and
lets running turns commit within ``--grace`` seconds; those still running then are cancelled
as a cancelled ``run`` is and given back to the inbox (another worker claims them). A second
SIGINT (Ctrl-C again) stops at once the same way; a repeated SIGTERM (a process manager may
signal the process and its group) changes nothing. A worker that is killed outright loses
nothing either: its claims expire after ``--claim-ttl`` and are claimed again.

``--agent`` takes what ``serve`` takes (``_agent.load_served_agent``): the turns commit to the
store this command opened.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Annotated, Any, Protocol

import typer

from ..durability.factory import redact
from ._agent import load_served_agent
from ._common import JsonOpt, StoreOpt, emit, log_to_stderr, open_store, out, run, store_url

__all__ = ["register"]

log = logging.getLogger("intention_kernel.worker")

MAX_POOL = 50
"""PostgreSQL connections a worker uses at most (one per running turn, and two more)."""


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)


def worker(
    agent: Annotated[
        str,
        typer.Option(
            "--agent",
            help="module:attribute of the agent, as for serve: a factory called with the opened"
            " store, a CompiledAgent or an AgentDefinition.",
            show_default=False,
        ),
    ],
    store: StoreOpt = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, max=10_000, help="Turns run at once.")
    ] = 4,
    claim_ttl: Annotated[
        float,
        typer.Option("--claim-ttl", help="Seconds a claim lasts unless renewed (if this dies)."),
    ] = 30.0,
    poll: Annotated[
        float,
        typer.Option("--poll", help="Seconds between looks for requests when idle."),
    ] = 0.5,
    max_attempts: Annotated[
        int, typer.Option("--max-attempts", min=1, help="Claims before a request is dead.")
    ] = 5,
    grace: Annotated[
        float,
        typer.Option("--grace", help="Seconds running turns get to finish at SIGTERM/SIGINT."),
    ] = 30.0,
    turn_timeout: Annotated[
        float, typer.Option("--turn-timeout", help="Each turn's deadline, in seconds.")
    ] = 600.0,
    worker_id: Annotated[
        str | None,
        typer.Option("--worker-id", help="Name in claims and logs (default: random)."),
    ] = None,
    schedules: Annotated[
        bool,
        typer.Option(
            "--schedules/--no-schedules",
            help="Also submit the agent's schedules' occurrences and the store's due timers.",
        ),
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Run the agent's submitted turns, and submit its schedules' occurrences, until SIGTERM
    or SIGINT (docs/inbox.md, docs/schedules.md).

    At the first signal it claims nothing more and running turns get --grace seconds to
    commit; then they are cancelled and given back to the inbox. A second SIGINT stops at once.
    Exit 0 after a stop.
    """

    async def body() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        stopping = _Stop(grace)
        for signum in (signal.SIGTERM, signal.SIGINT):  # before the agent loads: no traceback
            loop.add_signal_handler(signum, stopping.signalled, signum)
        try:
            pool = min(concurrency, MAX_POOL - 2) + 2
            async with open_store(store, pool_size=pool) as opened:
                served = await load_served_agent(agent, opened)
                running = served.worker(
                    worker_id=worker_id,
                    concurrency=concurrency,
                    claim_ttl=claim_ttl,
                    poll_interval=poll,
                    max_attempts=max_attempts,
                    grace=grace,
                    turn_timeout=turn_timeout,
                    schedules=schedules,
                )
                log.info(
                    "worker %s started on %s: agent %s, concurrency %d, claim ttl %ss, poll %ss,"
                    " %d schedule(s)",
                    running.worker_id,
                    redact(store_url(store)),
                    agent,
                    concurrency,
                    claim_ttl,
                    poll,
                    0 if running.scheduler is None else len(running.scheduler.schedules),
                )
                await stopping.run(running)
                log.info(
                    "worker %s stopped after %d request(s)", running.worker_id, running.completed
                )
                return {"worker_id": running.worker_id, "completed": running.completed}
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)

    with log_to_stderr():
        data = run(as_json, body)
    emit(
        as_json,
        data,
        lambda: out.print(
            f"worker {data['worker_id']} stopped: {data['completed']} request(s) finished",
            markup=False,
        ),
    )


class Worker(Protocol):
    """What this command uses of ``CompiledAgent.worker(...)``."""

    @property
    def worker_id(self) -> str: ...

    @property
    def running(self) -> int: ...

    @property
    def scheduler(self) -> Any: ...

    @property
    def completed(self) -> int: ...

    def stop(self) -> None: ...

    async def run(self) -> None: ...


class _Stop:
    """What SIGTERM and SIGINT do: the first drains the worker (or keeps it from starting),
    a second SIGINT cancels it; a repeated SIGTERM changes nothing."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.signals = 0
        self.worker: Worker | None = None
        self.task: asyncio.Task[None] | None = None

    def signalled(self, signum: signal.Signals) -> None:
        self.signals += 1
        name = "the worker" if self.worker is None else f"worker {self.worker.worker_id}"
        if self.signals == 1:
            running = 0 if self.worker is None else self.worker.running
            log.info(
                "%s stopping on %s: no new claims; %d running turn(s) get up to %ss to finish",
                name,
                signum.name,
                running,
                self.grace,
            )
            if self.worker is not None:
                self.worker.stop()
        elif signum is signal.SIGINT and self.task is not None:
            log.warning(
                "%s stopping now on a second SIGINT: running turns are cancelled and given back",
                name,
            )
            self.task.cancel()
        else:
            # A process manager may signal the process and its group: the drain goes on,
            # bounded by --grace. A second Ctrl-C is a person who wants out.
            log.info("%s is stopping already", name)

    async def run(self, worker: Worker) -> None:
        """Run ``worker`` until it drained (or was cancelled by a second SIGINT)."""
        self.worker = worker
        if self.signals:
            worker.stop()
        self.task = task = asyncio.get_running_loop().create_task(worker.run())
        try:
            await asyncio.wait({task})
        finally:
            if not task.done():  # this command was cancelled itself
                task.cancel()
                await asyncio.wait({task})
        if not task.cancelled():
            task.result()  # the worker's own failure, if any
