"""The turns this process is running or following: shared by duplicate requests, drained at
shutdown.

Why share in-process: a client that retries before its first request was answered (a flaky
mobile network) would otherwise wait on the thread's lease and maybe time out on it; here the
retry waits on the same task and gets the same committed result, and only one turn runs.
Across processes the store keeps the promise on its own (the lease serializes the thread, a
committed turn replays), so any instance may serve any thread.

Why drain: at shutdown running turns get ``grace`` seconds to commit, then are cancelled, which
follows the cancellation rules (started storage work finishes, an interrupted write is
``uncertain``); the client is told to deliver the same ``Idempotency-Key`` again. A request that
follows a submitted turn (``follow``) is drained the same way, next to the in-process workers:
the turn itself does not depend on it.

Why deliveries are counted: with the ``reject`` policy a request checks that its thread is free,
then submits; another turn of the thread being checked or submitted in this process meanwhile
makes the thread busy.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ..kernel import TurnResult

__all__ = ["Flight", "RunningTurns", "wait_out"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Flight:
    """A turn running for a request; ``fingerprint`` is what the request asked for."""

    fingerprint: str
    task: asyncio.Task[TurnResult]


class RunningTurns:
    """Every turn task of the service, and the in-flight ones by ``(thread_id, turn_id)``."""

    def __init__(self) -> None:
        self._flights: dict[tuple[str, str], Flight] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._followers: set[asyncio.Task[Any]] = set()
        self._deliveries: dict[tuple[str, str], int] = {}
        self._drain: asyncio.Task[None] | None = None

    @property
    def draining(self) -> bool:
        return self._drain is not None

    def __len__(self) -> int:
        """Turns run here directly (and their streams): not the requests following one."""
        return len(self._tasks)

    def thread_busy(self, thread_id: str, turn_id: str) -> bool:
        """Whether this process runs another turn of the thread directly, or is submitting
        another request of it."""
        return any(
            thread == thread_id and turn != turn_id
            for thread, turn in (*self._flights, *self._deliveries)
        )

    def in_flight(self, key: tuple[str, str]) -> bool:
        """Whether this process runs the turn ``key`` directly now."""
        flight = self._flights.get(key)
        return flight is not None and not flight.task.done()

    @contextlib.contextmanager
    def delivering(self, key: tuple[str, str]) -> Iterator[None]:
        """Count a delivery of ``key`` while it checks its thread and submits."""
        self._deliveries[key] = self._deliveries.get(key, 0) + 1
        try:
            yield
        finally:
            left = self._deliveries[key] - 1
            if left:
                self._deliveries[key] = left
            else:
                del self._deliveries[key]

    def follow(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` (a request following a submitted turn) as a task the drain waits for,
        and cancels after the grace."""
        task = asyncio.get_running_loop().create_task(work)
        self._followers.add(task)
        task.add_done_callback(self._followers.discard)
        return task

    def join_or_start(
        self,
        key: tuple[str, str],
        fingerprint: str,
        start: Coroutine[Any, Any, TurnResult],
    ) -> tuple[Flight, bool]:
        """The running flight of ``key`` (``True``: joined), or a new one running ``start``."""
        flight = self._flights.get(key)
        if flight is not None and not flight.task.done():
            start.close()
            return flight, True
        task = self.track(start)
        flight = Flight(fingerprint, task)
        self._flights[key] = flight
        task.add_done_callback(lambda _: self._forget(key, flight))
        return flight, False

    def track(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` as a task the shutdown drain waits for (and cancels after the grace)."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _forget(self, key: tuple[str, str], flight: Flight) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]

    def drain(
        self, grace: float, workers: Collection[asyncio.Task[Any]] = ()
    ) -> asyncio.Task[None]:
        """Start draining (new turns are refused from now on); the same task when called again.
        ``workers`` (already told to stop) are waited for and cancelled with the turns."""
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_task(self._drained(grace, set(workers)))
        return self._drain

    async def _drained(self, grace: float, workers: set[asyncio.Task[Any]]) -> None:
        tasks = {*self._tasks, *self._followers, *workers}
        if tasks:
            await asyncio.wait(tasks, timeout=max(0.0, grace))
        late = [task for task in {*self._tasks, *self._followers, *workers} if not task.done()]
        for task in late:
            task.cancel()
        for task in late:
            await wait_out(task)


async def wait_out(task: asyncio.Task[Any]) -> None:
    """Wait until ``task`` ended, even while our own task is being cancelled (then re-raise).

    A cancelled turn finishes its started storage work before it ends; whoever cancelled it
    waits for that, so a delivery of the same turn that follows sees the outcome.
    """
    interrupted = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            interrupted = True
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.exception()  # retrieved: its owner has gone
    if interrupted:
        raise asyncio.CancelledError
