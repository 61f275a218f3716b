"""A background event loop for hosts without one (``run_sync``, ``open_durability_sync``).

Why one loop on its own thread: an asyncio store is bound to the loop that opened it (a
connection pool, SQLite's worker), so every turn on that store must run on that loop. A WSGI
worker thread hands its turn to the loop and blocks until it ended; many threads may do so at
once. A blocked caller that is interrupted cancels its turn and still waits for it to end, as
a cancelled ``run`` does: started storage work finishes first.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, TypeVar

from ..contracts.durability import Durability, DurabilityStore, TurnScope
from ..contracts.errors import UsageError

__all__ = ["Portal", "SyncDurability", "default_portal", "portal_of"]

T = TypeVar("T")


def _refuse_in_loop(what: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise UsageError(
        f"{what} blocks its thread, so it cannot be called from a running event loop;"
        " await the async twin instead",
        context={"call": what},
    )


class _Job:
    """One coroutine running on the portal's loop, seen from the thread that submitted it."""

    __slots__ = ("_loop", "_task", "done")

    def __init__(self, loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, Any]) -> None:
        self._loop = loop
        self._task: asyncio.Task[Any] | None = None
        self.done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            loop.call_soon_threadsafe(self._start, work)
        except RuntimeError:
            work.close()
            raise UsageError("the portal is closed", context={"call": "portal"}) from None

    def _start(self, work: Coroutine[Any, Any, Any]) -> None:
        if not self.done.set_running_or_notify_cancel():
            work.close()  # cancelled before it started: nothing ran
            return
        self._task = self._loop.create_task(work)
        self._task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self.done.set_exception(asyncio.CancelledError())
        elif (error := task.exception()) is not None:
            self.done.set_exception(error)
        else:
            self.done.set_result(task.result())

    def _cancel_task(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def cancel_and_wait(self) -> None:
        """Cancel the work and block until it ended (its storage work finished)."""
        if self.done.cancel():
            return
        with contextlib.suppress(RuntimeError):  # a closed loop ran its tasks to the end
            self._loop.call_soon_threadsafe(self._cancel_task)
        concurrent.futures.wait([self.done])

    def result(self) -> Any:
        try:
            return self.done.result()
        except BaseException:
            if not self.done.done():  # interrupted while waiting (KeyboardInterrupt)
                self.cancel_and_wait()
            raise


class Portal:
    """An event loop on a daemon thread that blocking callers submit async work to.

    ``call`` runs one coroutine there and blocks for its result; ``iterate`` drives an async
    iterator there and hands its items over as a plain iterator. Safe from any number of
    threads; never from a running loop (``UsageError``). ``close`` cancels what still runs,
    waits for it and stops the thread.
    """

    def __init__(self, name: str = "intention-kernel-portal") -> None:
        self._loop = asyncio.new_event_loop()
        self._closing = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def closed(self) -> bool:
        return self._closed

    def _serve(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()

    def call(self, work: Callable[[], Awaitable[T]], *, what: str = "call") -> T:
        """Run ``work()`` on the portal's loop and block until it returned or raised."""
        self._refuse(what)
        job = _Job(self._loop, _awaited(work))
        result: T = job.result()
        return result

    def iterate(
        self, items: Callable[[], AsyncIterator[T]], *, what: str = "iterate"
    ) -> Generator[T, None, None]:
        """Drive ``items()`` on the portal's loop; its items arrive here as they are made.

        Closing the returned iterator early cancels the async one (it is closed on the loop)
        and blocks until that ended.
        """
        self._refuse(what)
        return self._iterate(items)

    def _refuse(self, what: str) -> None:
        _refuse_in_loop(what)
        if self._closed:
            raise UsageError("the portal is closed", context={"call": what})

    def _iterate(self, items: Callable[[], AsyncIterator[T]]) -> Generator[T, None, None]:
        handed: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

        async def pump() -> None:
            source = items()
            try:
                async for item in source:
                    handed.put((True, item))
            finally:
                close = getattr(source, "aclose", None)
                if close is not None:
                    await close()

        job = _Job(self._loop, pump())
        job.done.add_done_callback(lambda _: handed.put((False, None)))
        try:
            while True:
                more, item = handed.get()
                if not more:
                    break
                yield item
            job.result()  # the async iterator's error, if it failed
        finally:
            if not job.done.done():
                job.cancel_and_wait()

    def close(self, timeout: float | None = 30.0) -> None:
        """Cancel the work still running, wait for it, and stop the loop's thread."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
        if threading.current_thread() is self._thread:
            raise UsageError("a portal cannot close itself from its own loop")
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)


async def _awaited(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


_default: Portal | None = None
_default_lock = threading.Lock()


def default_portal() -> Portal:
    """The process's shared portal, started on first use and closed at exit."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Portal()
            atexit.register(_default.close)
        return _default


class SyncDurability:
    """A store opened on a portal's loop, for ``Kernel(durability=...)`` and ``run_sync``.

    It is a ``Durability`` (the kernel awaits ``with_turn`` on the portal's loop, where
    ``run_sync`` runs the turn). ``call`` runs any of the store's own coroutines there
    (``sync.call(lambda s: s.get_turn("t1", "turn-1"))``); ``close_sync`` closes it.
    """

    def __init__(self, store: DurabilityStore, portal: Portal) -> None:
        self._store = store
        self._portal = portal

    @property
    def store(self) -> DurabilityStore:
        """The store itself: use it only on ``portal.loop`` (or through ``call``)."""
        return self._store

    @property
    def portal(self) -> Portal:
        return self._portal

    def _check_loop(self) -> None:
        if asyncio.get_running_loop() is not self._portal.loop:
            raise UsageError(
                "this store lives on its portal's loop: use run_sync or stream_sync, or open"
                " the store with open_durability inside your own loop",
                context={"call": "with_turn"},
            )

    async def with_turn(
        self,
        thread_id: str,
        turn_id: str,
        operation: Callable[[TurnScope], Awaitable[T]],
        *,
        request_fingerprint: str | None = None,
    ) -> T:
        self._check_loop()
        return await self._store.with_turn(
            thread_id, turn_id, operation, request_fingerprint=request_fingerprint
        )

    def turn(
        self, thread_id: str, turn_id: str, *, request_fingerprint: str | None = None
    ) -> AbstractAsyncContextManager[TurnScope]:
        return self._store.turn(thread_id, turn_id, request_fingerprint=request_fingerprint)

    async def close(self) -> None:
        self._check_loop()
        await self._store.close()

    def call(self, work: Callable[[DurabilityStore], Awaitable[T]]) -> T:
        """Run ``work(store)`` on the store's loop and block for its result."""
        return self._portal.call(lambda: work(self._store), what="SyncDurability.call")

    def close_sync(self) -> None:
        """Close the store (on its loop) and block until it is closed; the portal stays up."""
        if self._portal.closed:
            return
        self._portal.call(self._store.close, what="close_sync")

    def __enter__(self) -> SyncDurability:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close_sync()


def portal_of(durability: Durability) -> Portal:
    """The portal a store's turns must run on: its own, or the shared one."""
    if isinstance(durability, SyncDurability):
        return durability.portal
    return default_portal()
