"""Pieces shared by the relay benchmarks: a timing sink wrapper and a turn that commits events."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from intention_kernel.contracts import DurabilityStore, KernelEvent, TurnScope
from intention_kernel.contracts.ids import new_id
from intention_kernel.relay import EventSink, PublishOutcome
from intention_kernel.testing.conformance import make_events, make_result


def postgres_dsn() -> str:
    """The server the PostgreSQL benchmarks use (``IK_POSTGRES_DSN``, as the tests do)."""
    return os.environ.get("IK_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def scratch_schema(prefix: str) -> str:
    """A fresh schema name, so a run never sees another run's rows."""
    return f"{prefix}_{new_id('s').split('_', 1)[1]}"


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
