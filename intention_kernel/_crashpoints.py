"""Test-only crash points at the named moments of the turn and effect lifecycle, and of the
outbox relay's batch (``RelayCrashPoint``).

A no-op unless a hook is installed. Fault tests install a hook in a real worker process to
``SIGKILL`` or ``SIGSTOP`` it exactly at a point, or raise ``SimulatedCrash`` in-process (a
``BaseException`` the library never catches, so nothing after the point runs).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

__all__ = [
    "AnyCrashPoint",
    "CrashPoint",
    "RelayCrashPoint",
    "SimulatedCrash",
    "crash_hook",
    "crash_point",
    "kill_at",
    "raise_at",
    "set_crash_hook",
]


class CrashPoint(StrEnum):
    LEASE_ACQUIRED = "lease_acquired"
    CHECKPOINT_LOADED = "checkpoint_loaded"
    EFFECT_PREPARED = "effect_prepared"
    """``prepared`` committed, operation not yet called."""
    EFFECT_IN_FLIGHT = "effect_in_flight"
    """Immediately before the operation is awaited."""
    EFFECT_RETURNED = "effect_returned"
    """The operation returned; its receipt is not yet recorded."""
    RECEIPT_RECORDED = "receipt_recorded"
    INSIDE_COMMIT = "inside_commit"
    """Inside the commit transaction, before it commits (called by adapters)."""
    AFTER_COMMIT = "after_commit"


class RelayCrashPoint(StrEnum):
    """Moments of one relay batch (RELIABILITY.md F17), kept apart from the turn points."""

    RELAY_CLAIMED = "relay_claimed"
    """RP1: a batch is claimed, nothing of it published yet."""
    RELAY_ACKED = "relay_acked"
    """RP2: the sink acknowledged a round; it is not yet marked delivered."""
    RELAY_MARKED = "relay_marked"
    """RP3: the round is marked delivered; the rest of the batch is still claimed."""


AnyCrashPoint = CrashPoint | RelayCrashPoint


class SimulatedCrash(BaseException):
    """Raised by an in-process crash hook; models the process dying at that point."""


CrashHook = Callable[[AnyCrashPoint, dict[str, Any]], None]
_hook: CrashHook | None = None


def crash_point(point: AnyCrashPoint, **info: Any) -> None:
    hook = _hook
    if hook is not None:
        hook(point, info)


def set_crash_hook(hook: CrashHook | None) -> CrashHook | None:
    """Install ``hook`` (or remove it with ``None``); returns the previous hook."""
    global _hook
    previous, _hook = _hook, hook
    return previous


@contextmanager
def crash_hook(hook: CrashHook) -> Iterator[None]:
    previous = set_crash_hook(hook)
    try:
        yield
    finally:
        set_crash_hook(previous)


def raise_at(point: AnyCrashPoint, *, times: int = 1) -> CrashHook:
    """A hook raising ``SimulatedCrash`` the first ``times`` times ``point`` is reached."""
    remaining = [times]

    def hook(reached: AnyCrashPoint, info: dict[str, Any]) -> None:
        if reached is point and remaining[0] > 0:
            remaining[0] -= 1
            raise SimulatedCrash(str(point))

    return hook


def kill_at(point: AnyCrashPoint, sig: int = signal.SIGKILL, *, nth: int = 1) -> CrashHook:
    """A hook sending ``sig`` to this process the ``nth`` time ``point`` is reached."""
    seen = [0]

    def hook(reached: AnyCrashPoint, info: dict[str, Any]) -> None:
        if reached is point:
            seen[0] += 1
            if seen[0] >= nth:
                os.kill(os.getpid(), sig)

    return hook
