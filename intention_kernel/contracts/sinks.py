"""``EventSink``: where the outbox relay publishes events.

A sink reports one outcome per event instead of raising, so the relay can acknowledge what
went out, retry what may go out later and dead-letter what never will:

* ``ok``: the sink durably accepted the event (broker ack, 2xx, fsync);
* ``retry``: this event failed for now (server error, timeout on a live connection); it counts
  as an attempt, is retried after a backoff and is dead-lettered after ``max_attempts``;
* ``reject``: never acceptable (refused by the receiver, too large); dead-letter it at once;
* ``unavailable``: the sink itself is down (connection refused, broker gone). Not the event's
  fault: the relay releases the batch without counting an attempt and pauses with backoff, so
  an outage never dead-letters the backlog.

The relay hands ``publish`` at most one event per thread per call, so a sink may send the events
of one call concurrently without breaking per-thread order. A sink that says ``keeps_order =
True`` gets a whole batch per call instead (several events per thread, in order): it writes a
call's events in the order given and never acknowledges an event after an event of the same
thread that it did not (the file and stdout sinks: one write of the whole call). One call per
batch instead of one per event of the busiest thread is what lets a relay with few threads per
batch keep up. Delivery is at least once:
consumers deduplicate by event id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from .errors import ErrorCode
from .events import KernelEvent

__all__ = ["EventSink", "OutcomeKind", "PublishOutcome"]


class OutcomeKind(StrEnum):
    OK = "ok"
    RETRY = "retry"
    REJECT = "reject"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    kind: OutcomeKind
    reason: str = ""
    code: ErrorCode | None = None

    @classmethod
    def ok(cls) -> PublishOutcome:
        return _OK

    @classmethod
    def retry(cls, reason: str) -> PublishOutcome:
        return cls(OutcomeKind.RETRY, reason, ErrorCode.SINK_FAILED)

    @classmethod
    def reject(cls, reason: str) -> PublishOutcome:
        return cls(OutcomeKind.REJECT, reason, ErrorCode.SINK_REJECTED)

    @classmethod
    def unavailable(cls, reason: str) -> PublishOutcome:
        return cls(OutcomeKind.UNAVAILABLE, reason, ErrorCode.SINK_UNAVAILABLE)

    def describe(self) -> str:
        """The text recorded as the event's ``last_error``."""
        return f"[{self.code}] {self.reason}" if self.code else self.reason


_OK = PublishOutcome(OutcomeKind.OK)


class EventSink(Protocol):
    """A destination for outbox events. Created by ``intention_kernel.relay.open_sink(url)``."""

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        """Publish ``events`` (at most one per thread, unless ``keeps_order``); one outcome
        per event, same order.

        Must not raise for delivery problems: report them as outcomes.
        """
        ...

    async def close(self) -> None: ...
