"""Lease rows: per-thread mutual exclusion without a transaction open while the turn runs.

A lease is a row ``(thread_id, owner, epoch, expires_at)``; expiry is computed on the database
clock. Acquiring inserts the row or takes over an expired one and bumps ``epoch``; the
``(epoch, owner)`` pair is the fencing token every write checks. A heartbeat renews the row
while the operation runs; if it cannot prove the lease is still held before it would expire,
or finds it taken, it cancels the turn, which then ends with ``LeaseLostError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ...contracts.errors import ConfigurationError
from .._engine import Lease

__all__ = ["Heartbeat", "LeaseSettings", "PgLease", "new_owner"]


@dataclass(slots=True)
class PgLease(Lease):
    """``epoch`` plus ``owner`` (unique per acquisition) is the fencing token."""

    owner: str = ""


_prefix: tuple[int, str] = (0, "")


def new_owner() -> str:
    """``host/pid/`` plus 128 random bits (as ``uuid4().hex``), unique per acquisition; the
    prefix is built once per process (again after a fork)."""
    global _prefix
    pid = os.getpid()
    if _prefix[0] != pid:
        _prefix = (pid, f"{socket.gethostname()[:40]}/{pid}/")
    return _prefix[1] + os.urandom(16).hex()


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """Lease timing: a crashed holder's lease expires after ``ttl`` seconds."""

    ttl: float = 10.0
    heartbeat: float | None = None
    """Seconds between renewals; defaults to ``ttl / 3``; must be shorter than ``ttl``."""

    def __post_init__(self) -> None:
        ttl = self.ttl
        if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 0.1 <= ttl <= 3600:
            raise ConfigurationError(
                "lease_ttl must be a number of seconds in [0.1, 3600]",
                context={"setting": "lease_ttl"},
            )
        beat = self.interval
        if not isinstance(beat, int | float) or isinstance(beat, bool) or not 0 < beat < ttl:
            raise ConfigurationError(
                "heartbeat_interval must be positive and shorter than lease_ttl",
                context={"setting": "heartbeat_interval"},
            )

    @property
    def interval(self) -> float:
        return self.ttl / 3 if self.heartbeat is None else self.heartbeat


@dataclass(slots=True)
class Heartbeat:
    """Renews one lease until stopped; cancels ``owner_task`` when the lease is lost.

    Most turns end before the first renewal is due, so ``start`` only arms a timer; the
    renewal task is created when the timer fires (one interval after ``start``, exactly when
    the first renewal of a task started at once would have been sent).
    """

    renew: Callable[[], Awaitable[bool]]
    settings: LeaseSettings
    owner_task: asyncio.Task[object]
    detect_loss: bool = True
    lost: bool = False
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _timer: asyncio.TimerHandle | None = field(default=None, init=False)
    _confirmed: float = field(default=0.0, init=False)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._confirmed = loop.time()  # the lease is proven valid until confirmed + ttl
        self._timer = loop.call_later(self.settings.interval, self._due)

    def _due(self) -> None:
        self._timer = None
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.settings.interval
        confirmed = self._confirmed
        delay = 0.0  # the first renewal is due now (the timer waited one interval)
        while True:
            if delay:
                await asyncio.sleep(delay)
            sent = loop.time()
            try:
                held = await self.renew()
            except Exception:
                held = None
            if held:
                confirmed, delay = sent, interval
                continue
            if held is None and loop.time() + 0.05 < confirmed + self.settings.ttl * 0.9:
                delay = min(interval, 0.2)  # transient failure: retry while still proven
                continue
            if not self.detect_loss:
                delay = interval
                continue
            self.lost = True
            self.owner_task.cancel()
            return
