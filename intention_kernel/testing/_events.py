"""``EventCollector``: an in-memory ``EventSink`` for tests of relays, kernels and event flows.

It records every publish (so tests count deliveries per event id and check per-thread order),
detects two deliveries of one event id in flight at the same time, and can be scripted to fail:
per event id (``script``), as a whole (``down``), or by blocking after it acknowledged a batch
(``hold``) to model a relay that dies between the sink's ack and ``mark_delivered``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

from ..contracts.events import KernelEvent
from ..contracts.sinks import PublishOutcome

__all__ = ["EventCollector"]


class EventCollector:
    """An in-memory ``EventSink`` that records what it acknowledged and can be told to fail
    (``script``, ``down``, ``hold``), for relay and kernel tests."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.delay = delay
        self.events: list[KernelEvent] = []
        """Every acknowledged event, in acknowledgement order (duplicates included)."""
        self.counts: Counter[str] = Counter()
        self.attempts: Counter[str] = Counter()
        self.script: dict[str, PublishOutcome] = {}
        """Outcome to report for an event id instead of ``ok`` (until removed)."""
        self.down: str | None = None
        """When set, every publish reports ``unavailable`` with this reason."""
        self.hold: asyncio.Event | None = None
        """When set, ``publish`` acknowledges its events, then waits for this event."""
        self.max_in_flight_per_id = 0
        self._in_flight: Counter[str] = Counter()
        self.publishes = 0
        self.closed = False

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        self.publishes += 1
        for event in events:
            self.attempts[event.id] += 1
            self._in_flight[event.id] += 1
            self.max_in_flight_per_id = max(self.max_in_flight_per_id, self._in_flight[event.id])
        try:
            await asyncio.sleep(self.delay)
            if self.down is not None:
                return [PublishOutcome.unavailable(self.down)] * len(events)
            outcomes = [self.script.get(event.id, PublishOutcome.ok()) for event in events]
            for event, outcome in zip(events, outcomes, strict=True):
                if outcome == PublishOutcome.ok():
                    self.events.append(event)
                    self.counts[event.id] += 1
            if self.hold is not None:
                await self.hold.wait()
            return outcomes
        finally:
            for event in events:
                self._in_flight[event.id] -= 1

    def by_thread(self) -> dict[str, list[KernelEvent]]:
        """Acknowledged events per thread, in acknowledgement order."""
        threads: dict[str, list[KernelEvent]] = {}
        for event in self.events:
            threads.setdefault(event.thread_id, []).append(event)
        return threads

    def of_type(self, type: str) -> list[KernelEvent]:
        return [e for e in self.events if e.type == type]

    def for_turn(self, turn_id: str) -> list[KernelEvent]:
        return [e for e in self.events if e.turn_id == turn_id]

    def types(self, turn_id: str | None = None) -> list[str]:
        events = self.events if turn_id is None else self.for_turn(turn_id)
        return [e.type for e in events]

    def clear(self) -> None:
        self.events.clear()
        self.counts.clear()

    async def close(self) -> None:
        self.closed = True
