"""Planted inbox bugs: the turn's request marked ``done`` outside the commit transaction, and a
submit that claims a busy thread's request.

The inbox promises that a request is ``done`` if and only if its turn committed: the commit
marks it in its own transaction. ``DoneBeforeCommit`` breaks that the way a worker that
"considers the run done" would: the request is marked done in a transaction of its own, then
the turn commits. A ``kill -9`` between the two leaves a ``done`` request whose turn never
committed (and never will: nobody claims a done request), and the thread's next request runs
on the wrong checkpoint. The inbox kill campaign must report it. Test-only, like
``tests.support.planted``; nothing of it is in a production class.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from intention_kernel.contracts.events import KernelEvent
from intention_kernel.contracts.turns import DurableTurnResult
from intention_kernel.durability._writes import utc_now
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.durability.sqlite._inbox_rows import mark_done
from intention_kernel.durability.store import DurableStore

__all__ = [
    "ClaimsBusyThreadsSQLite",
    "DoneBeforeCommit",
    "DoneBeforeCommitSQLite",
    "EarlyDoneScope",
]

MarkDone = Callable[[str, str], Awaitable[None]]


class EarlyDoneScope:
    """A ``TurnScope`` whose ``commit`` first marks the turn's request done (its own
    transaction), then commits the turn; everything else is the wrapped scope's."""

    def __init__(self, scope: Any, mark: MarkDone) -> None:
        self._scope = scope
        self._mark = mark

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scope, name)

    async def commit(
        self,
        result: DurableTurnResult,
        outbox: Sequence[KernelEvent] = (),
        *,
        progress: Sequence[str] = (),
    ) -> None:
        await self._mark(self._scope.thread_id, self._scope.turn_id)
        await self._scope.commit(result, outbox, progress=progress)


class DoneBeforeCommit(DurableStore[Any]):
    """Put first in a store's bases: its turns hand out ``EarlyDoneScope`` scopes."""

    async def mark_done_early(self, thread_id: str, turn_id: str) -> None:
        raise NotImplementedError

    def turn(
        self, thread_id: str, turn_id: str, *, request_fingerprint: str | None = None
    ) -> AbstractAsyncContextManager[Any]:
        opened = super().turn(thread_id, turn_id, request_fingerprint=request_fingerprint)
        return _wrapped(opened, self.mark_done_early)


class ClaimsBusyThreadsSQLite(SQLiteDurability):
    """The SQLite store with another bug: a submit that claims for a worker of its process
    does not look at its thread's open requests, so a later request runs before (or beside)
    an earlier one. The inbox kill campaign whose workers submit must report it."""

    @classmethod
    async def open(cls, *args: Any, **kwargs: Any) -> ClaimsBusyThreadsSQLite:
        store = await super().open(*args, **kwargs)
        store.inbox.storage.head_check = "SELECT 1 WHERE ?1 IS NULL"  # type: ignore[attr-defined]
        assert isinstance(store, ClaimsBusyThreadsSQLite)
        return store


class DoneBeforeCommitSQLite(DoneBeforeCommit, SQLiteDurability):
    """The SQLite store with the bug: the commit's own ``mark_done`` statement, run alone."""

    async def mark_done_early(self, thread_id: str, turn_id: str) -> None:
        await self._db.write(
            lambda conn: mark_done(conn, thread_id, turn_id, utc_now()), what="planted done"
        )


@asynccontextmanager
async def _wrapped(
    opened: AbstractAsyncContextManager[Any], mark: MarkDone
) -> AsyncIterator[EarlyDoneScope]:
    async with opened as scope:
        yield EarlyDoneScope(scope, mark)
