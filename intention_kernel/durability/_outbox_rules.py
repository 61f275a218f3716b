"""The outbox delivery rules as pure functions (see ``contracts.outbox`` for the state machine).

Stores that decide in Python (memory, SQLite) call them; the PostgreSQL adapter states the same
rules in SQL, and the outbox conformance suite holds every store to them.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..contracts.outbox import Partitions

__all__ = [
    "Candidate",
    "FailedAttempt",
    "claimable",
    "failed_attempt",
    "in_partitions",
    "may_hold_partition",
]


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """An event's delivery state after one more failed attempt."""

    attempts: int
    dead: bool
    next_attempt_at: datetime | None
    """When the event is due again (``None`` once dead)."""


def failed_attempt(
    attempts: int, *, max_attempts: int, permanent: bool, retry_in: float, now: datetime
) -> FailedAttempt:
    """Count the attempt; dead-letter when ``permanent`` or out of attempts, else back off."""
    counted = attempts + 1
    if permanent or counted >= max_attempts:
        return FailedAttempt(counted, True, None)
    return FailedAttempt(counted, False, now + timedelta(seconds=retry_in))


@dataclass(frozen=True, slots=True)
class Candidate:
    """An undelivered event as the claim rule sees it."""

    position: int
    thread_id: str
    dead: bool
    claimed_until: datetime | None
    next_attempt_at: datetime | None


def in_partitions(thread_id: str, partitions: Partitions | None) -> bool:
    """The thread is in a served partition (always, without partitions). CRC-32 of the id: the
    same thread lands in the same partition in every process and release."""
    if partitions is None:
        return True
    return zlib.crc32(thread_id.encode()) % partitions.count in partitions.served


def may_hold_partition(
    holder: str | None, held_until: datetime | None, relay_id: str, now: datetime
) -> bool:
    """A partition lease can be taken when nobody holds it, its lease has run out, or the
    relay already holds it (a renewal)."""
    return holder is None or holder == relay_id or held_until is None or held_until <= now


def claimable(
    candidates: Iterable[Candidate],
    *,
    now: datetime,
    limit: int,
    partitions: Partitions | None = None,
) -> list[int]:
    """Positions to claim, from undelivered events in position order: per thread a prefix of
    its undelivered sequence. For stores with one writer, whose positions follow each thread's
    order (``contracts.outbox``); PostgreSQL's claim does not rely on that. A dead,
    live-claimed or not-yet-due event holds back the later events of its own thread only.
    Threads outside ``partitions`` are not looked at."""
    held_back: set[str] = set()
    chosen: list[int] = []
    for event in candidates:
        if len(chosen) >= limit:
            break
        if event.thread_id in held_back or not in_partitions(event.thread_id, partitions):
            continue
        claimed = event.claimed_until is not None and event.claimed_until > now
        due = event.next_attempt_at is None or event.next_attempt_at <= now
        if event.dead or claimed or not due:
            held_back.add(event.thread_id)
            continue
        chosen.append(event.position)
    return chosen
