"""The outbox relay: deliver committed outbox events to a sink, at least once, in order per
thread, with retries, dead letters and retention. See ``docs/relay.md``.

    from intention_kernel.relay import OutboxRelay, open_sink

    sink = open_sink("nats://127.0.0.1:4222/orders.events?stream=ORDERS")
    relay = OutboxRelay(store, sink, relay_id="relay-1")
    await relay.run()  # until relay.stop()

    # three relays sharing the threads, each started with its own share:
    OutboxRelay(store, sink, partition=Partition.parse("0/3"))

The store is any ``OutboxSource`` (``open_durability(url)`` gives one for SQLite, PostgreSQL
and memory URLs); the command line is ``intention-kernel outbox ...``.
"""

from ..contracts.outbox import (
    OutboxNotifier,
    OutboxSource,
    OutboxStats,
    Partition,
    PartitionLease,
    Partitions,
)
from ..contracts.sinks import EventSink, OutcomeKind, PublishOutcome
from ._backoff import Backoff
from ._relay import BatchReport, OutboxRelay, RelayStats
from .signing import sign, verify_signature
from .sinks import SINK_SCHEMES, open_sink

__all__ = [
    "SINK_SCHEMES",
    "Backoff",
    "BatchReport",
    "EventSink",
    "OutboxNotifier",
    "OutboxRelay",
    "OutboxSource",
    "OutboxStats",
    "OutcomeKind",
    "Partition",
    "PartitionLease",
    "Partitions",
    "PublishOutcome",
    "RelayStats",
    "open_sink",
    "sign",
    "verify_signature",
]
