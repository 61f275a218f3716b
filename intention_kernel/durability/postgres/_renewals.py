"""Lease renewals of one store, sent together: one statement renews every lease that is due.

Why: with many turns waiting on slow model calls, one renewal statement per held lease every
interval makes heartbeat traffic grow with the number of turns in flight. Heartbeats fire on a
shared grid (``_lease.due_at``), so the leases due at the same moment ask in the same loop
iteration, and one ``renew_group`` statement (``_sql``) renews them all; each lease's answer is
whether its own row (epoch and owner) was renewed. A failed statement fails every waiter (their
heartbeats retry while the lease is still proven, as for a single renewal); a waiter that gave
up (its own deadline) leaves the statement to the others.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ._connection import PgConnection
from ._lease import PgLease
from ._sql import Statements

__all__ = ["Renewals"]


class Renewals:
    """Collects the renewals asked in one loop iteration and sends them as one statement."""

    def __init__(self, db: PgConnection, sql: Statements, ttl: float) -> None:
        self._db = db
        self._sql = sql
        self._ttl = ttl
        self._asked: list[tuple[PgLease, asyncio.Future[bool]]] = []
        self._sending: set[asyncio.Task[None]] = set()
        self.statements = 0
        """Renewal statements sent (a diagnostic for benchmarks)."""

    async def renew(self, lease: PgLease) -> bool:
        """Whether ``lease`` is still held and now renewed for another ``ttl``."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bool] = loop.create_future()
        if not self._asked:
            loop.call_soon(self._send)
        self._asked.append((lease, answer))
        return await answer

    def _send(self) -> None:
        asked, self._asked = self._asked, []
        task = asyncio.get_running_loop().create_task(self._renew(asked))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _renew(self, asked: list[tuple[PgLease, asyncio.Future[bool]]]) -> None:
        waiting = [(lease, answer) for lease, answer in asked if not answer.done()]
        if not waiting:
            return
        self.statements += 1
        try:
            rows: list[Any] = await self._db.fetch(
                self._sql.renew_group,
                [lease.thread_id for lease, _ in waiting],
                [lease.epoch for lease, _ in waiting],
                [lease.owner for lease, _ in waiting],
                self._ttl,
            )
        except Exception as exc:
            for _, answer in waiting:
                if not answer.done():
                    answer.set_exception(exc)
            return
        renewed = {row["owner"] for row in rows}
        for lease, answer in waiting:
            if not answer.done():
                answer.set_result(lease.owner in renewed)

    async def close(self) -> None:
        if self._sending:
            await asyncio.wait(self._sending)
