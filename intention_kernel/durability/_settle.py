"""Storage work that a cancellation cannot cut in half.

Cancelling a task interrupts only the coroutine that awaits: a statement already sent, or a
``COMMIT`` already running on a worker thread, goes on. If the caller then released the lease
or skipped its bookkeeping, a duplicate delivery could take the thread before the write
landed, or the caller could believe a committed write never happened. ``settle`` waits for
the work to finish whatever happens to the caller, and hands back the cancellation so the
caller can first record what it now knows, then re-raise it (cancellation is delayed, never
swallowed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from functools import partial
from typing import Any, TypeVar

__all__ = ["settle"]

T = TypeVar("T")


def _wake(waiter: asyncio.Future[None], _: Any) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def settle(work: Awaitable[T]) -> tuple[T, asyncio.CancelledError | None]:
    """Await ``work`` to its end; return its result and the cancellation that arrived meanwhile.

    If ``work`` raised, that error is raised - unless the caller was cancelled meanwhile, then
    the cancellation is raised (chained to the error). The caller must re-raise a returned
    cancellation once its bookkeeping is done.
    """
    task = asyncio.ensure_future(work)
    # ``asyncio.shield`` without its bookkeeping: the caller waits on a future of its own,
    # which a cancel of the caller cancels, never the task.
    waiter = task.get_loop().create_future()
    task.add_done_callback(partial(_wake, waiter))
    try:
        await waiter
        return task.result(), None
    except asyncio.CancelledError as exc:
        if task.cancelled():
            raise  # the work itself was cancelled (loop shutdown): nothing more to wait for
        cancel = exc
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            continue  # the same cancellation repeated: keep waiting
    if task.cancelled():
        raise cancel
    error = task.exception()
    if error is None:
        return task.result(), cancel
    if isinstance(error, Exception):
        raise cancel from error
    raise error  # a BaseException such as a simulated crash ends everything at once
