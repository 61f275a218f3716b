"""Pieces shared by the relay benchmarks: a timing sink wrapper and a turn that commits events."""

from __future__ import annotations

import time
from collections.abc import Sequence

from intention_kernel.contracts import DurabilityStore, KernelEvent, TurnScope
from intention_kernel.relay import EventSink, PublishOutcome
from intention_kernel.testing.conformance import make_events, make_result


class Timed:
    """Wraps a sink and records when each event was first acknowledged."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self.acked: dict[str, float] = {}

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        outcomes = await self.sink.publish(events)
        now = time.perf_counter()
        for event, outcome in zip(events, outcomes, strict=True):
            if outcome == PublishOutcome.ok():
                self.acked.setdefault(event.id, now)
        return outcomes

    async def close(self) -> None:
        await self.sink.close()


async def commit_turn(store: DurabilityStore, thread: str, turn: str, per_turn: int) -> list[str]:
    """Commit one turn with ``per_turn`` outbox events; returns their ids."""
    ids: list[str] = []

    async def operation(scope: TurnScope) -> None:
        events = make_events(scope, per_turn)
        ids.extend(e.id for e in events)
        await scope.commit(make_result(scope), events)

    await store.with_turn(thread, turn, operation)
    return ids
