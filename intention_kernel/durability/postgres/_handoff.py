"""Thread leases taken by a submit that claims, held for the worker that runs the turn.

Why: a request handed to a worker of the submitting process (``NewRequest.claimer``) is run at
once; its submit statement also takes the thread's lease with the checkpoint, so the turn opens
without an acquire of its own (one round trip and one transaction fewer per submitted turn).
The lease is the same lease an acquire takes (same owner token, epoch and expiry), so fencing,
heartbeats and the commit's release are unchanged. One the worker does not take up within a
heartbeat interval (it stopped, the run failed before opening) is given back; a late open then
acquires as usual.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ...contracts.errors import KernelError
from .._settle import settle
from ._acquire import Acquired, acquired_from
from ._lease import LeaseSettings, new_owner

__all__ = ["HandedLeases"]

log = logging.getLogger("intention_kernel.postgres")

GiveBack = Callable[[str, str], Awaitable[None]]
"""Release what an acquisition by ``owner`` of the thread may have taken (thread, owner)."""


class HandedLeases:
    """Leases taken for a turn by its submit, until ``take`` (the turn's open) or expiry."""

    def __init__(self, lease_settings: LeaseSettings, give_back: GiveBack) -> None:
        self.lease_settings = lease_settings
        self._give_back = give_back
        self._held: dict[tuple[str, str], tuple[Acquired, asyncio.TimerHandle]] = {}
        self._background: set[asyncio.Task[None]] = set()

    async def submit(
        self, statement: Callable[[str, float], Awaitable[Any]], thread_id: str, turn_id: str
    ) -> Any:
        """Run the submit statement (given a fresh owner token and the lease ttl) to its end
        whatever happens to the caller; keep the lease it took, or give back what it may have
        taken when its outcome is unknown (the request itself is the inbox's: a claim that no
        worker runs expires like any other)."""
        owner = new_owner()
        sent = asyncio.get_running_loop().time()
        try:
            row, cancel = await settle(statement(owner, self.lease_settings.ttl))
        except BaseException as exc:
            if not (isinstance(exc, KernelError) and not exc.retryable):
                self._spawn(self._give_back(thread_id, owner))  # it may have taken the lease
            raise
        epoch = None if row is None else row["lease_epoch"]
        if epoch is not None:
            if cancel is not None:
                self._spawn(self._give_back(thread_id, owner))
            else:
                self._hold(thread_id, turn_id, acquired_from(row, thread_id, owner, sent, epoch))
        if cancel is not None:
            raise cancel
        return row

    def take(self, thread_id: str, turn_id: str) -> Acquired | None:
        """The lease the turn's submit took, now the opener's (``None``: there is none)."""
        held = self._held.pop((thread_id, turn_id), None)
        if held is None:
            return None
        held[1].cancel()
        return held[0]

    def _hold(self, thread_id: str, turn_id: str, acquired: Acquired) -> None:
        key = (thread_id, turn_id)
        earlier = self._held.pop(key, None)
        if earlier is not None:  # a second hand-off of the same turn: keep the newer one
            self._expire(key, earlier)
        timer = asyncio.get_running_loop().call_later(
            self.lease_settings.interval, self._unused, key
        )
        self._held[key] = (acquired, timer)

    def _unused(self, key: tuple[str, str]) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self._expire(key, held)

    def _expire(self, key: tuple[str, str], held: tuple[Acquired, asyncio.TimerHandle]) -> None:
        held[1].cancel()
        lease = held[0].lease
        if lease is not None:
            self._spawn(self._give_back(key[0], lease.owner))

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception as exc:  # the lease then expires after its ttl
                log.debug("handed lease give-back failed: %r", exc)

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Give back every lease no turn took up, and wait for the give-backs."""
        for key in list(self._held):
            self._unused(key)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
