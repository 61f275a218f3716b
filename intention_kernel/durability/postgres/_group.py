"""Group commit on PostgreSQL: the turn commits that are ready together go as one statement.

Why: with many turns in flight every commit pays its own round trip, statement, transaction
and WAL flush. A commit that finds the store idle sends its own statement at once (one client
waits no longer than before); commits that arrive while one is in flight queue, and as soon as
it ends one writer sends every queued commit of distinct threads as one ``commit_group``
statement (``_sql``): one transaction, one WAL flush. Nothing waits on purpose.

Each row keeps its own fence and head compare-and-set, so one turn's lost lease or conflict
never fails or commits another; the caller judges its row exactly as a single commit's
(``PostgresTurns``). The statement is one transaction: nothing of it is half-applied. If the
server refuses it as a whole (an integrity error no row check foresaw), each commit is sent
alone, so the offending one fails by itself; any other failure (the connection lost, a
timeout) reaches every commit of the group as an ambiguous outcome, recognised on retry as a
single commit's is. A caller cancelled meanwhile still gets its outcome first (its commit runs
inside ``settle``); the writer is never cancelled by a caller.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from ..storage import TurnCommit
from ._connection import PgConnection
from ._lease import PgLease
from ._sql import Statements

__all__ = ["MAX_GROUP", "CommitGroup"]

MAX_GROUP = 64
"""Commits one statement carries at most (the rest go in the next)."""

Send = Callable[[PgLease, TurnCommit], Awaitable[Any]]


@dataclass(slots=True)
class _Queued:
    lease: PgLease
    commit: TurnCommit
    answer: asyncio.Future[Any]


class CommitGroup:
    """The commit path of one store: alone when idle, in groups when commits queue up."""

    def __init__(self, db: PgConnection, sql: Statements, send_one: Send) -> None:
        self._db = db
        self._sql = sql
        self._send_one = send_one
        self._queue: deque[_Queued] = deque()
        self._busy = False
        self._writer: asyncio.Task[None] | None = None
        self.sizes: Counter[int] = Counter()
        """Statements sent, by the number of commits they carried (1: a commit alone)."""

    async def commit(self, lease: PgLease, commit: TurnCommit) -> Any:
        """The commit's row (as ``commit`` or ``commit_group`` answer it)."""
        if self._busy:
            queued = _Queued(lease, commit, asyncio.get_running_loop().create_future())
            self._queue.append(queued)
            return await queued.answer
        self._busy = True
        try:
            self.sizes[1] += 1
            return await self._send_one(lease, commit)
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
        """Wait for the commits in flight (each caller is waiting for its answer anyway)."""
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

    def _take(self) -> list[_Queued]:
        """The queued commits of distinct threads, oldest first (a second commit of a thread,
        which only a stale lease can send, waits for the next statement)."""
        group: list[_Queued] = []
        later: list[_Queued] = []
        threads: set[str] = set()
        while self._queue and len(group) < MAX_GROUP:
            queued = self._queue.popleft()
            if queued.commit.thread_id in threads:
                later.append(queued)
            else:
                threads.add(queued.commit.thread_id)
                group.append(queued)
        self._queue.extendleft(reversed(later))
        return group

    async def _alone(self, queued: _Queued) -> None:
        self.sizes[1] += 1
        try:
            row = await self._send_one(queued.lease, queued.commit)
        except BaseException as exc:
            _answer(queued, None, exc)
            if not isinstance(exc, Exception):
                raise
        else:
            _answer(queued, row, None)

    async def _together(self, group: list[_Queued]) -> None:
        try:
            rows = await self._db.fetch(self._sql.commit_group, *_arguments(group))
        except BaseException as exc:
            if isinstance(exc.__cause__, asyncpg.IntegrityConstraintViolationError):
                for queued in group:  # refused as a whole, nothing written: one by one
                    await self._alone(queued)
                return
            for queued in group:
                _answer(queued, None, exc)
            if not isinstance(exc, Exception):
                raise
            return
        self.sizes[len(group)] += 1
        for queued, row in zip(group, rows, strict=True):
            _answer(queued, row, None)


def _answer(queued: _Queued, row: Any, error: BaseException | None) -> None:
    if queued.answer.done():
        return
    if error is None:
        queued.answer.set_result(row)
    else:
        queued.answer.set_exception(error)


def _arguments(group: list[_Queued]) -> list[Any]:
    """The arrays of ``commit_group``: one element per commit, then events and progress
    items each with the (1-based) row of their commit."""
    columns: list[list[Any]] = [[] for _ in range(9)]
    event_rows: list[int] = []
    sequences: list[int] = []
    events: list[str] = []
    item_rows: list[int] = []
    items: list[str] = []
    for k, queued in enumerate(group, start=1):
        lease, commit = queued.lease, queued.commit
        values = (
            commit.thread_id,
            lease.epoch,
            lease.owner,
            commit.turn_id,
            commit.revision,
            commit.fingerprint,
            commit.result_json,
            commit.agent_fingerprint,
            commit.pending_interaction,
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
        for event, encoded in zip(commit.events, commit.events_json, strict=True):
            event_rows.append(k)
            sequences.append(event.sequence)
            events.append(encoded)
        item_rows.extend(k for _ in commit.progress)
        items.extend(commit.progress)
    return [*columns, event_rows, sequences, events, item_rows, items]
