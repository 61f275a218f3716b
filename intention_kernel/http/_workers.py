"""The in-process workers of the service: they run the turns its requests submit.

Why in the service's process: a submitted turn needs a worker, and an instance that accepts
turns is the obvious place to run some (``workers=0`` leaves that to other processes, the
``intention-kernel worker`` command or other instances). Why they do not depend on requests: a
worker claims whatever request of the store is due, submitted by this instance or another, so
a client that disconnects, or rejoins on another instance, changes nothing for its turn. At
shutdown they stop claiming and are drained with the requests that follow their turns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from ..contracts.errors import ConfigurationError
from ..kernel import CompiledAgent

__all__ = ["InProcessWorkers"]

logger = logging.getLogger("intention_kernel.http")

MAX_WORKERS = 64


class _Worker(Protocol):
    """What the service needs of ``CompiledAgent.worker(...)``."""

    @property
    def running(self) -> int: ...

    def stop(self) -> None: ...

    async def run(self) -> None: ...


class InProcessWorkers:
    """``count`` workers of ``agent`` with ``settings`` (``CompiledAgent.worker`` keywords),
    started with the application's lifespan and stopped by the drain."""

    def __init__(
        self, agent: CompiledAgent, count: int, settings: Mapping[str, Any], grace: float
    ) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_WORKERS:
            raise ConfigurationError(
                f"workers must be an integer from 0 to {MAX_WORKERS}",
                context={"setting": "workers"},
            )
        self.agent = agent
        self.count = count if agent.inbox is not None else 0
        self.settings: dict[str, Any] = {"grace": max(grace, 0.01), **settings}
        if self.count:
            agent.worker(**self.settings)  # refuses bad settings now (ConfigurationError)
        self._workers: list[_Worker] = []
        self.tasks: list[asyncio.Task[None]] = []

    @property
    def running(self) -> int:
        """Turns the workers run now."""
        return sum(worker.running for worker in self._workers)

    def start(self) -> None:
        """Start the workers (once; nothing for a store without an inbox)."""
        if self.tasks or not self.count:
            return
        loop = asyncio.get_running_loop()
        for _ in range(self.count):
            worker: _Worker = self.agent.worker(**self.settings)
            task = loop.create_task(worker.run())
            task.add_done_callback(_report)
            self._workers.append(worker)
            self.tasks.append(task)

    def stop(self) -> None:
        """No new claims; running turns finish within the workers' grace."""
        for worker in self._workers:
            worker.stop()


def _report(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.error("an in-process worker stopped", exc_info=error)
