"""Statements of many turns sent as one: alone when the store is idle, together when they queue.

Why: with many turns in flight every turn pays its own round trip, statement and transaction.
A write that finds nothing of its kind in flight is sent alone at once (one client waits no
longer than before); writes that arrive while one is in flight queue, and as soon as it ends one
writer sends every queued write of distinct threads as one statement. Nothing waits on purpose.

Each row of such a statement keeps its own checks (fence, compare-and-set, lease rule), so one
turn's outcome never decides another's; the caller judges its row exactly as it judges the
answer of its own statement. A statement is one transaction: nothing of it is half-applied. If
the server refuses it as a whole in a way no row check foresaw (``one_by_one``), each write is
sent alone, so the offending one fails by itself; any other failure (the connection lost, a
timeout) reaches every write of the group as an ambiguous outcome, recognised on retry as a
single write's is. A caller cancelled meanwhile still gets its outcome first (it waits inside
``settle``); the writer is never cancelled by a caller.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["MAX_GROUP", "Batch"]

MAX_GROUP = 64
"""Writes one statement carries at most (the rest go in the next)."""

Item = TypeVar("Item")


@dataclass(slots=True)
class _Queued(Generic[Item]):
    item: Item
    answer: asyncio.Future[Any]


class Batch(Generic[Item]):
    """One kind of write of one store: ``send`` answers each write's row.

    ``thread_of``: two writes of one thread never share a statement. ``send_one``: a write
    alone. ``send_many``: the rows of writes sent together, in their order (``None``: send them
    one by one after all, e.g. on a session where the statement cannot run). ``one_by_one``:
    whether a statement's failure means it was refused as a whole, nothing written."""

    def __init__(
        self,
        *,
        thread_of: Callable[[Item], str],
        send_one: Callable[[Item], Awaitable[Any]],
        send_many: Callable[[Sequence[Item]], Awaitable[Sequence[Any] | None]],
        one_by_one: Callable[[BaseException], bool],
    ) -> None:
        self._thread_of = thread_of
        self._send_one = send_one
        self._send_many = send_many
        self._one_by_one = one_by_one
        self._queue: deque[_Queued[Item]] = deque()
        self._busy = False
        self._writer: asyncio.Task[None] | None = None
        self.sizes: Counter[int] = Counter()
        """Statements sent, by the number of writes they carried (1: a write alone)."""

    @property
    def queued(self) -> int:
        """Writes waiting for the next statement."""
        return len(self._queue)

    async def send(self, item: Item) -> Any:
        """The write's row (as ``send_one`` or ``send_many`` answer it)."""
        if self._busy:
            queued = _Queued(item, asyncio.get_running_loop().create_future())
            self._queue.append(queued)
            return await queued.answer
        self._busy = True
        try:
            self.sizes[1] += 1
            return await self._send_one(item)
        finally:
            self._next()

    def _next(self) -> None:
        """Hand over to a writer for what queued meanwhile, or become idle."""
        if self._queue:
            self._writer = asyncio.get_running_loop().create_task(self._write())
        else:
            self._busy = False
            self._writer = None

    async def close(self) -> None:
        """Wait for the writes in flight (each caller is waiting for its answer anyway)."""
        while (writer := self._writer) is not None:
            await asyncio.wait((writer,))
            if self._writer is writer:
                break

    async def _write(self) -> None:
        try:
            group = self._take()
            if len(group) == 1:
                await self._alone(group[0])
            else:
                await self._together(group)
        finally:
            self._next()

    def _take(self) -> list[_Queued[Item]]:
        """The queued writes of distinct threads, oldest first (a second write of a thread
        waits for the next statement)."""
        group: list[_Queued[Item]] = []
        later: list[_Queued[Item]] = []
        threads: set[str] = set()
        while self._queue and len(group) < MAX_GROUP:
            queued = self._queue.popleft()
            thread_id = self._thread_of(queued.item)
            if thread_id in threads:
                later.append(queued)
            else:
                threads.add(thread_id)
                group.append(queued)
        self._queue.extendleft(reversed(later))
        return group

    async def _alone(self, queued: _Queued[Item]) -> None:
        self.sizes[1] += 1
        try:
            row = await self._send_one(queued.item)
        except BaseException as exc:
            _answer(queued, None, exc)
            if not isinstance(exc, Exception):
                raise
        else:
            _answer(queued, row, None)

    async def _together(self, group: list[_Queued[Item]]) -> None:
        try:
            rows = await self._send_many([queued.item for queued in group])
        except BaseException as exc:
            if self._one_by_one(exc):
                rows = None  # refused as a whole, nothing written
            else:
                for queued in group:
                    _answer(queued, None, exc)
                if not isinstance(exc, Exception):
                    raise
                return
        if rows is None:
            for queued in group:
                await self._alone(queued)
            return
        self.sizes[len(group)] += 1
        for queued, row in zip(group, rows, strict=True):
            _answer(queued, row, None)


def _answer(queued: _Queued[Any], row: Any, error: BaseException | None) -> None:
    if queued.answer.done():
        return
    if error is None:
        queued.answer.set_result(row)
    else:
        queued.answer.set_exception(error)
