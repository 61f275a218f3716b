"""Test-only crash points at the named moments of the turn and effect lifecycle.

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
    "CrashPoint",
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


class SimulatedCrash(BaseException):
    """Raised by an in-process crash hook; models the process dying at that point."""


CrashHook = Callable[[CrashPoint, dict[str, Any]], None]
_hook: CrashHook | None = None


def crash_point(point: CrashPoint, **info: Any) -> None:
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


def raise_at(point: CrashPoint, *, times: int = 1) -> CrashHook:
    """A hook raising ``SimulatedCrash`` the first ``times`` times ``point`` is reached."""
    remaining = [times]

    def hook(reached: CrashPoint, info: dict[str, Any]) -> None:
        if reached is point and remaining[0] > 0:
            remaining[0] -= 1
            raise SimulatedCrash(str(point))

    return hook


def kill_at(point: CrashPoint, sig: int = signal.SIGKILL) -> CrashHook:
    """A hook sending ``sig`` to this process when ``point`` is reached."""

    def hook(reached: CrashPoint, info: dict[str, Any]) -> None:
        if reached is point:
            os.kill(os.getpid(), sig)

    return hook
