"""Jobs of the SQLite worker thread: a function to run, its caller's future, and how its
outcome goes back to the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from ._errors import translate_errors

__all__ = ["MAX_GROUP", "Job", "hand_back", "translated"]


class Job:
    """One function for the worker thread. ``claim`` decides, once, between the worker
    starting it and a cancelled caller dropping it; ``finished`` and the result are set on the
    event loop's thread (``_deliver``), so a caller never misses the end of a started job."""

    __slots__ = ("claim", "context", "ended", "finished", "fn", "future", "loop", "on_commit")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], Any],
        on_commit: Callable[[], None] | None,
        context: Any,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.fn = fn
        self.on_commit = on_commit
        self.context = context
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.claim = threading.Lock()
        self.finished = False
        self.ended: asyncio.Future[None] | None = None


def _deliver(job: Job, result: Any, error: BaseException | None) -> None:
    """On the event loop's thread: the job ended; hand its outcome to whoever waits."""
    job.finished = True
    future = job.future
    if not future.done():
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    ended = job.ended
    if ended is not None and not ended.done():
        ended.set_result(None)


def hand_back(job: Job, result: Any, error: BaseException | None) -> None:
    """From the worker thread: deliver a job's outcome on its event loop."""
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
        job.loop.call_soon_threadsafe(_deliver, job, result, error)


def translated(exc: BaseException, context: Any) -> BaseException:
    """``exc`` as ``translate_errors`` with ``context`` would have raised it."""
    try:
        with translate_errors(**context):
            raise exc
    except BaseException as typed:
        return typed


MAX_GROUP = 64
"""Write jobs one group commit takes at most (the rest form the next group)."""
