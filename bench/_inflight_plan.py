"""The pure parts of ``bench/inflight.py``: the simulated model call of every turn, which
turns carry an effect, the turns a side with no overhead at all would finish, and the figures
drawn from a cell's samples.

Every side runs the same schedule: turn ``n`` of slot ``s`` waits ``model_wait(s, n)`` seconds
(spread evenly over [1, 3), from a fixed hash, so no per-slot random generator is kept alive
and every side waits exactly as long) and carries ``effects_of(s, n)`` effects (0 or 1, half
the turns each, alternating per slot so half of the turns in flight hold one at any moment).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

MIN_WAIT = 1.0
MAX_WAIT = 3.0
MEAN_WAIT = (MIN_WAIT + MAX_WAIT) / 2
PAGE = os.sysconf("SC_PAGE_SIZE")


def model_wait(slot: int, n: int) -> float:
    """Seconds the simulated model call of turn ``n`` (from 1) of ``slot`` takes, in [1, 3)."""
    x = ((slot + 1) * 0x9E3779B1 + (n + 1) * 0x85EBCA77) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x45D9F3B) & 0xFFFFFFFF
    x ^= x >> 16
    return MIN_WAIT + (MAX_WAIT - MIN_WAIT) * x / 2**32


def effects_of(slot: int, n: int) -> int:
    """Effects turn ``n`` of ``slot`` records: 0 or 1, alternating."""
    return (slot + n) % 2


def ideal_turns(in_flight: int, seconds: float, cap: int = 0) -> int:
    """Turns finished within ``seconds`` if opening, effects and commit cost nothing: each slot
    runs its turns back to back, each lasting exactly its model wait (at most ``cap`` turns
    started in all when ``cap`` is set; slots start them in turn order)."""
    finished: list[float] = []
    for slot in range(in_flight):
        at, n = 0.0, 0
        while at < seconds:
            n += 1
            at += model_wait(slot, n)
            if at <= seconds:
                finished.append(at)
    if cap <= 0:
        return len(finished)
    return len(sorted(finished)[:cap])


def percentile(values: Sequence[float], share: float) -> float | None:
    """The ``share`` quantile (nearest rank) of ``values``, or ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def parse_statm(text: str) -> int:
    """Resident bytes from ``/proc/<pid>/statm`` (its second field, in pages)."""
    return int(text.split()[1]) * PAGE


def rss_bytes() -> int:
    """Resident bytes of this process now (0 without ``/proc``)."""
    try:
        return parse_statm(Path("/proc/self/statm").read_text())
    except (OSError, ValueError, IndexError):
        return 0


def per_in_flight(grown: int | None, in_flight: int) -> float | None:
    """Bytes grown, as KiB per turn in flight."""
    if grown is None or in_flight <= 0:
        return None
    return round(max(0, grown) / 1024 / in_flight, 2)
