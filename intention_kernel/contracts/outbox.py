"""``OutboxSource``: what the outbox relay needs from a store.

A store that keeps committed outbox events implements this protocol so one or more relays can
deliver them at least once, in order per thread. Every method is one short transaction; no
transaction stays open while a sink publishes. Times (claim expiry, retry time, ages) are taken
from the store's own clock (SQL ``now()``), never from the relay's.

Delivery state of an event (by its ``position``, its place in the store)::

    pending --claim--> claimed --mark_delivered--> delivered --prune--> (gone)
       ^                  |  \\--record_failure (attempts < max)--> pending, due after retry_in
       |                  |  \\--record_failure (attempts >= max or permanent)--> dead
       |                  \\--release / claim expired--> pending (attempts unchanged)
       \\------------------------ requeue(dead) <--------------------------------/

**Order.** A thread's events are ordered by ``(revision, sequence)``: the thread revision its
turn committed, then the event's place in that turn (``thread_order``). Positions only spread
the work across threads (the relay walks them in position order, older first); they are not
trusted to order a thread, so a store numbered by several writers (a database sharded by
thread, each node with its own sequence) keeps its threads in order all the same. A source
that records no revision (0) is taken to number each thread in order.

**Claim rule.** ``claim(relay_id, limit, lease)`` returns at most ``limit`` events that are
neither delivered nor dead, in ``delivery_order``, where each returned event ``e``:

* is not claimed by a live claim (any relay, including this one; an expired claim counts as no
  claim, so a killed relay's events come back after ``lease`` seconds with the same event id);
* is due (``next attempt time <= now``, or never failed);
* has no earlier undelivered event of its thread (in thread order), unless that earlier event
  is returned in the same batch. So a batch holds, per thread, a prefix of the thread's
  undelivered sequence; an event that is backing off, claimed by another relay **or dead**
  holds back the later events of its own thread only (other threads keep flowing).

Dead events keep holding their thread back because delivery is promised in order per thread: a
consumer must never see a thread's later event before an earlier one. A dead event stays visible
(``dead_letters``, ``OutboxStats.dead`` and ``blocked_threads``) until an operator re-queues it;
being the thread's earliest undelivered event, it is then claimed first and the thread resumes
in order.

The returned events are claimed by ``relay_id`` until ``now + lease``. Two relays never hold a
live claim on the same event. PostgreSQL can implement ``claim`` with a short transaction over
``FOR UPDATE SKIP LOCKED`` on the candidates plus claim columns (``claimed_by``,
``claimed_until``), excluding threads that have an earlier undelivered row (dead ones included)
that is not a candidate; SQLite (one writer) with one ``BEGIN IMMEDIATE`` transaction.

**After publishing**, the relay calls ``mark_delivered`` only for events the sink acknowledged,
``record_failure`` for the first failed event of a thread, and ``release`` for the rest of that
thread's batch. ``mark_delivered`` is idempotent and does not require the claim (the sink acked,
so it is true); ``record_failure`` and ``release`` apply only while ``relay_id`` still holds the
claim and return whether they did.

**Partitions.** Relays can share the threads instead of competing for them: a relay started
with ``Partition(i, n)`` holds a lease on partition ``i`` of ``n`` (``hold_partition``, renewed
well within ``lease``) and claims only threads the store places in the partitions it serves
(``claim(..., partitions=)``). A thread is always in the same partition, so its order is kept
within one relay's share. A partition whose lease has expired (its relay stopped or died) is
served by the next live partition counting up (cyclically), until a relay holds it again: no
partition is left to a dead process for longer than one lease. The row claims stay the rule that
keeps two relays apart; partitions only stop them from walking each other's rows, so a moment
when two relays both serve a partition (during a hand-over) costs time, never order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from .errors import ConfigurationError
from .events import StoredEvent

__all__ = [
    "MAX_PARTITIONS",
    "OutboxNotifier",
    "OutboxSource",
    "OutboxStats",
    "Partition",
    "PartitionLease",
    "Partitions",
    "delivery_order",
    "served_partitions",
]

MAX_PARTITIONS = 1024
"""More relays than this on one store would spend their time on partition leases."""

_PARTITION = re.compile(r"\s*(\d{1,4})\s*/\s*(\d{1,4})\s*")


@dataclass(frozen=True, slots=True)
class Partition:
    """A relay's own share of the threads: partition ``index`` of ``count`` (``"i/n"``)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        valid = (
            type(self.index) is int
            and type(self.count) is int
            and 1 <= self.count <= MAX_PARTITIONS
            and 0 <= self.index < self.count
        )
        if not valid:
            raise ConfigurationError(
                f"a partition is i/n with 1 <= n <= {MAX_PARTITIONS} and 0 <= i < n",
                context={"index": repr(self.index)[:20], "count": repr(self.count)[:20]},
            )

    @classmethod
    def parse(cls, text: str) -> Partition:
        """``"1/3"`` -> ``Partition(1, 3)``; anything else is a ``ConfigurationError``."""
        found = _PARTITION.fullmatch(text) if isinstance(text, str) else None
        if found is None:
            raise ConfigurationError(
                "a partition is written i/n, e.g. 0/3", context={"partition": str(text)[:40]}
            )
        return cls(int(found.group(1)), int(found.group(2)))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True, slots=True)
class Partitions:
    """The partitions (of ``count``) a relay serves now; empty while another live relay holds
    its own partition."""

    count: int
    served: frozenset[int]


def served_partitions(own: Partition, held: bool, live: Iterable[int]) -> Partitions:
    """What a relay serves: its own partition if it ``held`` the lease, and every partition
    without a live holder whose next live partition counting up (cyclically) is its own.
    ``live``: the other partitions of ``own.count`` held by a live lease."""
    if not held:
        return Partitions(own.count, frozenset())
    taken = set(live) | {own.index}
    served = {own.index}
    step = (own.index - 1) % own.count
    while step not in taken:  # walk down from its own to the previous live partition
        served.add(step)
        step = (step - 1) % own.count
    return Partitions(own.count, frozenset(served))


def delivery_order(events: Iterable[StoredEvent]) -> list[StoredEvent]:
    """The events in position order, except that each thread's events fill its positions in
    thread order (``StoredEvent.thread_order``): threads interleave as their positions say,
    and a thread's events never go out of order, however its positions were numbered. A
    thread with an event whose revision is not recorded (0: a source written before
    revisions) keeps its position order."""
    by_position = sorted(events, key=lambda e: e.position)
    by_thread: dict[str, list[StoredEvent]] = {}
    for stored in by_position:
        by_thread.setdefault(stored.event.thread_id, []).append(stored)
    queues = {
        thread: iter(
            sorted(rows, key=lambda e: e.thread_order)
            if all(e.revision > 0 for e in rows)
            else rows
        )
        for thread, rows in by_thread.items()
    }
    return [next(queues[stored.event.thread_id]) for stored in by_position]


@dataclass(frozen=True, slots=True)
class PartitionLease:
    """A relay's lease on a partition, as the store keeps it (``outbox stats``): a lease that is
    not ``live`` any more stays listed until a relay takes the partition again."""

    count: int
    index: int
    holder: str
    held_until: datetime
    live: bool


@dataclass(frozen=True, slots=True)
class OutboxStats:
    """Delivery backlog of an outbox, for monitoring and the ``stats`` command."""

    pending: int
    """Neither delivered nor dead (claimed events included)."""
    claimed: int
    """Pending events under a live claim."""
    dead: int
    """Dead-lettered events waiting for an operator (``requeue``)."""
    delivered: int
    """Delivered events not yet pruned."""
    oldest_pending_age: float | None
    """Seconds since the oldest pending event occurred (``None`` when nothing is pending)."""
    blocked_threads: int = 0
    """Threads held back by a dead event (their later events wait for ``requeue``)."""
    partitions: tuple[PartitionLease, ...] = ()
    """Relay partition leases, by partition count and index (given up ones are gone)."""


@runtime_checkable
class OutboxSource(Protocol):
    """Claim, acknowledge, fail, re-queue and prune outbox events (see the module docstring)."""

    async def claim(
        self, relay_id: str, *, limit: int, lease: float, partitions: Partitions | None = None
    ) -> list[StoredEvent]:
        """Claim up to ``limit`` deliverable events for ``lease`` seconds, in
        ``delivery_order``, of the threads in ``partitions`` (all threads when ``None``).

        ``StoredEvent.attempts`` and ``last_error`` reflect earlier failed attempts.
        """
        ...

    async def hold_partition(
        self, relay_id: str, partition: Partition, *, lease: float
    ) -> Partitions:
        """Take or renew ``relay_id``'s lease on its ``partition`` for ``lease`` seconds (taken
        only if free, expired or already its own); returns what it serves now
        (``served_partitions``)."""
        ...

    async def release_partition(self, relay_id: str, partition: Partition) -> bool:
        """Give the partition's lease up (graceful stop) so its next relay serves it at once;
        whether ``relay_id`` held it."""
        ...

    async def mark_delivered(self, relay_id: str, positions: Sequence[int]) -> int:
        """Record that the sink acknowledged these events; returns how many changed state.

        Clears the claim, sets ``delivered_at`` (idempotent: already delivered rows keep theirs).
        """
        ...

    async def record_failure(
        self,
        relay_id: str,
        position: int,
        *,
        error: str,
        retry_in: float,
        max_attempts: int,
        permanent: bool = False,
    ) -> StoredEvent | None:
        """Count a failed attempt and release the claim.

        ``attempts += 1`` and ``last_error = error``; the event is dead-lettered when
        ``permanent`` or ``attempts >= max_attempts``, otherwise it becomes due again after
        ``retry_in`` seconds. Returns the updated event, or ``None`` when ``relay_id`` no longer
        holds the claim (nothing recorded: another relay owns the event now).
        """
        ...

    async def release(self, relay_id: str, positions: Sequence[int]) -> int:
        """Give back claims without counting an attempt (graceful stop, held-back events)."""
        ...

    async def requeue(
        self, positions: Sequence[int] | None = None, *, thread_id: str | None = None
    ) -> int:
        """Make dead events pending again (all, by position, or by thread); ``attempts`` restarts
        at 0 and ``last_error`` is kept for the record. Returns how many were re-queued."""
        ...

    async def dead_letters(self, *, limit: int = 100) -> list[StoredEvent]:
        """Dead events in position order, with their attempts and reason (``last_error``)."""
        ...

    async def prune(self, older_than: float) -> int:
        """Delete events delivered more than ``older_than`` seconds ago; pending and dead events
        are always kept. Returns how many were deleted."""
        ...

    async def outbox_stats(self) -> OutboxStats: ...


@runtime_checkable
class OutboxNotifier(Protocol):
    """Optional: a store that can wake relays when events commit (e.g. PostgreSQL NOTIFY).

    A hint only: relays still poll with a bounded interval, since notifications can be missed.
    """

    async def wait_for_events(self, max_wait: float) -> None:
        """Return when new events may have been committed, or after ``max_wait`` seconds."""
        ...
