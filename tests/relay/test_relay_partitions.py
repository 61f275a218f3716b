"""Partitioned relays and sinks that keep order, on the memory source (the stores' side of
partitions is in the outbox conformance suite; processes on PostgreSQL in
``tests/faults/test_relay_postgres.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from intention_kernel.contracts import ConfigurationError, KernelEvent
from intention_kernel.relay import OutboxRelay, Partition, PublishOutcome
from intention_kernel.testing import EventCollector, MemoryDurability

from ._support import FAST, commit_workload, eventually, first_delivery_order, run_until_drained


class OrderedCollector(EventCollector):
    """A sink that keeps order, as the contract says: nothing of a thread is acknowledged after
    one of its events was not."""

    keeps_order = True

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        self.calls.append(len(events))
        failed: set[str] = set()
        outcomes: list[PublishOutcome] = []
        for event in events:
            if event.thread_id in failed:
                outcomes.append(PublishOutcome.retry("behind an earlier failure"))
                continue
            (outcome,) = await super().publish([event])
            if outcome != PublishOutcome.ok():
                failed.add(event.thread_id)
            outcomes.append(outcome)
        return outcomes


class CarelessCollector(EventCollector):
    """Says it keeps order, but acknowledges a thread's events after one that failed."""

    keeps_order = True


async def test_a_sink_that_keeps_order_gets_the_whole_batch_in_one_call() -> None:
    store, sink = MemoryDurability(), OrderedCollector()
    committed = await commit_workload(store, threads=3, turns=4, per_turn=5)
    report = await OutboxRelay(store, sink, batch_size=100).run_once()
    assert (report.claimed, report.delivered) == (60, 60)
    assert sink.calls == [60]  # one call, where one event per thread per call took 20
    assert first_delivery_order(sink.events) == committed


async def test_a_failure_in_an_ordered_call_holds_back_the_rest_of_its_thread_only() -> None:
    store, sink = MemoryDurability(), OrderedCollector()
    committed = await commit_workload(store, threads=3, turns=2, per_turn=3)
    t0 = committed["t0"]
    sink.script[t0[2]] = PublishOutcome.retry("flaky")
    report = await OutboxRelay(store, sink, batch_size=100, backoff=FAST).run_once()
    assert (report.delivered, report.retried, report.released) == (2 + 12, 1, 3)
    stored = {e.event.id: e for e in await store.read_outbox(limit=100)}
    assert [stored[i].delivered_at is not None for i in t0] == [True, True] + [False] * 4
    assert stored[t0[2]].attempts == 1
    sink.script.clear()
    relay = OutboxRelay(store, sink, batch_size=100, backoff=FAST, poll_interval=0.01)
    await run_until_drained(store, [relay])
    assert first_delivery_order(sink.events) == committed
    assert max(sink.counts.values()) == 1


async def test_a_careless_ordered_sinks_later_acks_of_a_failed_thread_are_not_recorded() -> None:
    store, sink = MemoryDurability(), CarelessCollector()
    committed = await commit_workload(store, threads=2, turns=1, per_turn=4)
    t0 = committed["t0"]
    sink.script[t0[1]] = PublishOutcome.retry("flaky")
    report = await OutboxRelay(store, sink, batch_size=100, backoff=FAST).run_once()
    assert report.delivered == 1 + 4  # t0's first, all of t1: not t0's after the failure
    stored = {e.event.id: e for e in await store.read_outbox(limit=100)}
    assert [stored[i].delivered_at is not None for i in t0] == [True, False, False, False]


async def test_partitioned_relays_split_the_threads_and_a_stopped_ones_share_moves_on() -> None:
    store, sink = MemoryDurability(), EventCollector()
    first = await commit_workload(store, threads=30, turns=3, per_turn=2)
    relays = [
        OutboxRelay(
            store,
            sink,
            relay_id=f"r{i}",
            batch_size=20,
            poll_interval=0.01,
            claim_ttl=0.6,  # the partition lease is renewed every 0.2 s
            partition=Partition(i, 3),
        )
        for i in range(3)
    ]
    tasks = [asyncio.create_task(relay.run()) for relay in relays]
    await eventually(lambda: [r.stats.partitions for r in relays] == [(0,), (1,), (2,)])
    relays[0].stop()
    await tasks[0]
    assert relays[0].stats.partitions == ()  # its lease was given up on the way out
    # The next live partition counting up (1) serves partition 0 from its next renewal on.
    await eventually(lambda: relays[1].stats.partitions == (0, 1), within=3)
    second = await commit_workload(store, threads=30, turns=1, per_turn=2, prefix="u")
    await run_until_drained(store, relays[1:], running=tasks[1:])
    committed = {**first, **{k: v for k, v in second.items() if k.startswith("u")}}
    assert first_delivery_order(sink.events) == committed
    assert max(sink.counts.values()) == 1
    assert all(relay.stats.delivered for relay in relays)


def test_a_partition_is_checked_where_it_is_given() -> None:
    for text in ("3/3", "1/0", "x", "-1/3", "1/3/4", "2000/4096"):
        with pytest.raises(ConfigurationError):
            Partition.parse(text)
    assert Partition.parse(" 2 / 5 ") == Partition(2, 5) and str(Partition(2, 5)) == "2/5"
    with pytest.raises(ConfigurationError):
        Partition(True, 2)
    with pytest.raises(ConfigurationError):
        OutboxRelay(MemoryDurability(), EventCollector(), partition="0/3")  # type: ignore[arg-type]
