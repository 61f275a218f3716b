"""Lease rows: per-thread mutual exclusion without a transaction open while the turn runs.

A lease is a row ``(thread_id, owner, epoch, expires_at)``; expiry is computed on the database
clock. Acquiring inserts the row or takes over an expired one and bumps ``epoch``; the
``(epoch, owner)`` pair is the fencing token every write checks. The turn's commit releases
the row in its own statement (``released``). A heartbeat renews the row while the operation
runs, and stops when the commit is sent (a renewal racing the release would find it released
and take that for a loss); if it cannot prove the lease is still held before it would expire
(every renewal is bounded by that moment: a hung statement or an exhausted pool cannot hide a
loss), or finds it taken, it cancels the turn, which then ends with ``LeaseLostError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ...contracts.errors import ConfigurationError
from ..storage import Lease

__all__ = ["Heartbeat", "LeaseSettings", "PgLease", "new_owner"]


@dataclass(slots=True)
class PgLease(Lease):
    """``epoch`` plus ``owner`` (unique per acquisition) is the fencing token."""

    owner: str = ""
    released: bool = field(default=False, compare=False)
    """The commit released the lease (in its own statement): nothing is left to give back."""
    heartbeat: Heartbeat | None = field(default=None, compare=False, repr=False)
    writing: int = field(default=0, compare=False)
    """Fenced writes in flight: the release waits for them, so none arrives after it."""
    _idle: asyncio.Event | None = field(default=None, init=False, repr=False, compare=False)

    def write(self) -> _Writing:
        """Count one fenced write while its statement runs (``with lease.write(): ...``)."""
        return _Writing(self)

    async def writes_done(self, seconds: float) -> None:
        """Wait (at most ``seconds``) until no write of this lease is in flight."""
        if self.writing:
            self._idle = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._idle.wait()


class _Writing:
    """``PgLease.write``: a plain class, not a generator (it wraps every fenced statement)."""

    __slots__ = ("_lease",)

    def __init__(self, lease: PgLease) -> None:
        self._lease = lease

    def __enter__(self) -> None:
        self._lease.writing += 1

    def __exit__(self, *exc: object) -> None:
        lease = self._lease
        lease.writing -= 1
        if not lease.writing and lease._idle is not None:
            lease._idle.set()


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


def due_at(earliest: float, interval: float, ttl: float) -> float:
    """The first point of the shared renewal grid at or after ``earliest``. Its step is a
    quarter interval, less when the heartbeat leaves little room before the lease's proven
    validity ends (``0.9 * ttl``, see ``Heartbeat``); none when it leaves none."""
    step = min(interval, 0.9 * ttl - interval) / 4
    if step <= 0:
        return earliest
    return math.ceil(earliest / step) * step


@dataclass(slots=True)
class Heartbeat:
    """Renews one lease until stopped; cancels ``owner_task`` when the lease is lost.

    Most turns end before the first renewal is due, so ``start`` only arms a timer; the
    renewal task is created when the timer fires (one interval after ``start``, moved to the
    store's renewal grid, ``due_at``, so leases due together renew in one statement).
    """

    renew: Callable[[], Awaitable[bool]]
    settings: LeaseSettings
    owner_task: asyncio.Task[object]
    detect_loss: bool = True
    lost: bool = False
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _timer: asyncio.TimerHandle | None = field(default=None, init=False)
    _confirmed: float = field(default=0.0, init=False)

    def start(self, confirmed: float | None = None) -> None:
        """Arm the first renewal. ``confirmed`` is when the acquiring statement was sent (the
        lease is proven valid until ``confirmed + ttl``); by default now."""
        loop = asyncio.get_running_loop()
        self._confirmed = loop.time() if confirmed is None else confirmed
        self._timer = loop.call_at(self._next(loop.time()), self._due)

    def _due(self) -> None:
        self._timer = None
        self._task = asyncio.get_running_loop().create_task(self._run())

    def resume(self) -> None:
        """Re-arm after a ``halt`` whose reason went away (a commit that did not release):
        the next renewal is due one interval after the last proven one."""
        if self._timer is not None or self.lost:
            return
        loop = asyncio.get_running_loop()
        self._task = None
        self._timer = loop.call_at(self._next(self._confirmed), self._due)

    def _next(self, after: float) -> float:
        """When the renewal following one proven at ``after`` is due: on the store's shared
        grid (``due_at``), so the leases due together renew in one statement."""
        settings = self.settings
        return due_at(after + settings.interval, settings.interval, settings.ttl)

    def halt(self) -> None:
        """Stop renewing at once; from then on the heartbeat cannot cancel the owner."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if self._task is not None:
            self._task.cancel()

    async def stop(self) -> None:
        """``halt``, then wait until a renewal in flight has ended, so none lands after the
        release. Only the renewal task's end is awaited, never its outcome: a cancel of the
        caller propagates instead of being taken for the renewal task's own."""
        self.halt()
        if self._task is not None:
            await asyncio.wait((self._task,))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        ttl, interval = self.settings.ttl, self.settings.interval
        delay = 0.0  # the first renewal is due now (the timer waited one interval)
        while True:
            if delay:
                await asyncio.sleep(delay)
            sent = loop.time()
            # The lease is proven held until confirmed + ttl, less a margin (the server took
            # its expiry after ``sent``; clock rates). No renewal attempt may outlast that.
            valid_until = self._confirmed + ttl * 0.9
            held: bool | None
            try:
                async with asyncio.timeout_at(valid_until if self.detect_loss else None):
                    held = await self.renew()
            except TimeoutError:
                held = False  # not proven renewed before it could expire: lost
            except Exception:
                held = None
            if held:
                self._confirmed = sent
                delay = max(0.0, self._next(sent) - loop.time())
                continue
            if held is None and loop.time() + 0.05 < valid_until:
                # Transient failure: retry while still proven (never sleeping past it).
                delay = min(interval, 0.2, valid_until - loop.time())
                continue
            if not self.detect_loss:
                delay = interval
                continue
            self.lost = True
            self.owner_task.cancel()
            return
