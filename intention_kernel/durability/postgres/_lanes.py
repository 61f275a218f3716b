"""``Lanes``: the store's connections, kept between statements instead of checked out of the
asyncpg pool for each one.

A pool checkout and release costs more client CPU than the statement it wraps (a queue, a
shielded release task and an inactivity timer each time: about 200 us a statement on a
2-core machine, measured in ``bench/profile_turns.py``). Every statement of the store is its
own transaction, so a connection between two statements holds nothing on the server and can
go straight to the next statement. Lanes keep such idle connections on a stack:

- a statement takes the most recently used idle lane, or checks a new one out of the pool
  (at most the pool's ``max_size``), or waits for one in turn (first come, first served);
- after the statement the lane goes to the next waiter or back on the stack;
- a lane whose statement failed other than by the server's refusal (cancelled, timed out,
  connection lost) goes back to the pool, which waits for asyncpg's cancellation to finish,
  resets or closes it;
- lanes that were not needed during the last ``idle_seconds`` go back to the pool, so other
  users of a shared pool (and ``store.pool`` itself) get them when the store is quiet.

Behind PgBouncer in transaction mode this is what the pooler expects: no transaction spans
two statements, so a kept client connection does not pin a server connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import asyncpg

__all__ = ["Lanes"]

T = TypeVar("T")

IDLE_SECONDS = 0.25
"""How long a lane may stay unused before it goes back to the pool."""


class Lanes:
    """Connections of one store, kept between statements (see the module docstring)."""

    def __init__(self, pool: Any, *, idle_seconds: float = IDLE_SECONDS) -> None:
        self._pool = pool
        size = getattr(pool, "get_max_size", None)
        self._limit: int = max(1, size()) if callable(size) else 1
        self._idle_seconds = idle_seconds
        self._idle: list[Any] = []
        """Idle lanes, the most recently used last."""
        self._open = 0
        """Lanes checked out of the pool: idle, running a statement, or being handed over."""
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._spare = 0
        """Fewest idle lanes since the last sweep: that many were not needed."""
        self._sweep: asyncio.TimerHandle | None = None
        self._returns: set[asyncio.Task[None]] = set()
        self._closed = False

    # ---------------------------------------------------------------- statements

    async def run(self, call: Callable[[Any, float], Awaitable[T]], seconds: float) -> T:
        """``call(connection, seconds left)`` on a lane, within ``seconds``, the wait for a lane
        included (``call`` bounds its statements by the seconds it is given: one timer a
        statement, asyncpg's own, instead of a timeout scope around it)."""
        conn = self._idle_lane()
        if conn is None:
            loop = asyncio.get_running_loop()
            start = loop.time()
            async with asyncio.timeout(seconds):
                conn = await self._take()
            seconds = max(seconds - (loop.time() - start), 0.001)
        try:
            result = await call(conn, seconds)
        except BaseException as exc:
            self._after_error(conn, exc)
            raise
        self._give(conn)
        return result

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """A lane for a block of statements, given back after the block."""
        conn = self._idle_lane() or await self._take()
        try:
            yield conn
        except BaseException as exc:
            self._after_error(conn, exc)
            raise
        self._give(conn)

    # ---------------------------------------------------------------- taking and giving

    def _idle_lane(self) -> Any:
        """The most recently used idle lane that is still open, or ``None``. A connection the
        server closed meanwhile (a restart) is already back in asyncpg's pool, which opens a
        new one on its next checkout: it is dropped here, never handed to a statement."""
        idle = self._idle
        while idle:
            conn = idle.pop()
            if len(idle) < self._spare:
                self._spare = len(idle)
            if _usable(conn):
                return conn
            self._return(conn)
        return None

    async def _take(self) -> Any:
        """A lane when none is idle: a new one from the pool, or the next one given back."""
        if self._closed:
            raise asyncpg.InterfaceError("the store is closed")
        if self._open >= self._limit or self._waiters:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                conn = await waiter
            except BaseException:
                if not waiter.done() or waiter.cancelled():
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                elif waiter.result() is not None:  # handed over just as this was cancelled
                    self._give(waiter.result())
                else:  # a place was passed on just as this was cancelled
                    self._open -= 1
                    self._pass_place()
                raise
            if conn is not None and _usable(conn):
                return conn
            if conn is not None:  # closed meanwhile: this waiter opens a new one in its place
                self._discard(conn)
            # ``None``: a lane went back to the pool; its place is this waiter's.
        else:
            self._open += 1
        try:
            return await self._pool.acquire()
        except BaseException:
            self._open -= 1
            self._pass_place()
            raise

    def _give(self, conn: Any) -> None:
        """After a statement that left ``conn`` idle: to a waiter, or onto the stack."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        if self._closed:
            self._return(conn)
            return
        self._idle.append(conn)
        if self._sweep is None:
            self._spare = len(self._idle)
            self._sweep = asyncio.get_running_loop().call_later(self._idle_seconds, self._swept)

    def _after_error(self, conn: Any, exc: BaseException) -> None:
        """A server refusal leaves the connection idle and usable; anything else may have left
        a statement running or the connection broken: the pool decides (it waits for asyncpg's
        cancellation, resets or closes)."""
        if isinstance(exc, asyncpg.PostgresError) and _usable(conn, idle=True):
            self._give(conn)
        else:
            self._return(conn)

    def _return(self, conn: Any) -> None:
        """Back to the pool; its place among the lanes goes to the first waiter."""
        self._open -= 1
        self._discard(conn)
        self._pass_place()

    def _discard(self, conn: Any) -> None:
        """Release ``conn`` to the pool in a task a cancellation of the caller cannot stop."""
        task = asyncio.get_running_loop().create_task(self._release(conn))
        self._returns.add(task)
        task.add_done_callback(self._returns.discard)

    async def _release(self, conn: Any) -> None:
        with contextlib.suppress(Exception):  # the pool already closed or terminated it
            await self._pool.release(conn)

    def _pass_place(self) -> None:
        """A lane's place in the limit is free: the first waiter opens one."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._open += 1
                waiter.set_result(None)
                return

    def _swept(self) -> None:
        """Lanes not needed since the last sweep (the fewest idle at any moment) go back."""
        self._sweep = None
        spare, self._spare = self._spare, 0
        for _ in range(min(spare, len(self._idle))):
            self._return(self._idle.pop(0))  # the least recently used first
        if self._idle:
            self._spare = len(self._idle)
            self._sweep = asyncio.get_running_loop().call_later(self._idle_seconds, self._swept)

    async def close(self) -> None:
        """Give every idle lane back to the pool; busy ones go back when their statement ends."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        while self._idle:
            self._return(self._idle.pop())
        if self._returns:
            await asyncio.wait(self._returns)


def _usable(conn: Any, *, idle: bool = False) -> bool:
    """Whether ``conn`` is still open and still the store's (with ``idle``: and outside a
    transaction). asyncpg detaches a pooled connection when the server closes it, and a
    detached one raises ``InterfaceError`` on every call: it is not the store's any more."""
    try:
        return not conn.is_closed() and not (idle and conn.is_in_transaction())
    except asyncpg.InterfaceError:
        return False
