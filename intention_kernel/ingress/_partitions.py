"""Run one loop per partition until a stop, and stop them for sure.

Why a stop event of its own rather than cancellation alone: a broker's driver may turn a
cancellation into a connection error (its own read cancelled, or a sibling's on a shared
connection), and a loop that retries connection errors would then run on. Every partition loop
also watches ``halt``, set when the caller's ``stopping`` is set and when ``run`` itself is
cancelled, so each ends at its next look whatever the driver did with the cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["run_partitions"]

Loop = Callable[[int, asyncio.Event], Coroutine[Any, Any, None]]


async def run_partitions(partitions: int, loop: Loop, stopping: asyncio.Event) -> None:
    """``loop(index, halt)`` for each partition until ``stopping`` is set (or this is
    cancelled); a loop's failure stops the others and is raised."""
    halt = asyncio.Event()

    async def relay() -> None:
        await stopping.wait()
        halt.set()

    watcher = asyncio.create_task(relay())
    tasks = [asyncio.create_task(loop(index, halt)) for index in range(partitions)]
    try:
        # Not ``gather``: cancelled, it waits for the loops before this code runs, and a loop
        # whose cancellation the driver swallowed would only end once ``halt`` is set here.
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        halt.set()
        watcher.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.wait([watcher, *tasks])
    for task in tasks:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error
