"""The relay core on the memory source and the in-memory collector sink."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from intention_kernel.contracts import ConfigurationError, DurabilityError, ErrorCode, StoredEvent
from intention_kernel.relay import Backoff, OutboxRelay, Partitions, PublishOutcome
from intention_kernel.testing import EventCollector, MemoryDurability
from intention_kernel.testing.conformance.outbox import commit_events

from ._support import FAST, commit_workload, eventually, first_delivery_order, run_until_drained


async def test_three_relays_deliver_10000_events_once_each_in_thread_order() -> None:
    store = MemoryDurability()
    sink = EventCollector()
    relays = [
        OutboxRelay(store, sink, relay_id=f"relay-{i}", batch_size=200, poll_interval=0.01)
        for i in range(3)
    ]
    tasks = [asyncio.create_task(relay.run()) for relay in relays]
    committed = await commit_workload(store, threads=200, turns=10, per_turn=5)
    for task in tasks:
        assert not task.done()
    await run_until_drained(store, relays, running=tasks)
    assert sum(len(ids) for ids in committed.values()) == 10_000
    assert set(sink.counts) == {i for ids in committed.values() for i in ids}
    assert max(sink.counts.values()) == 1, "an event was delivered twice"
    assert sink.max_in_flight_per_id == 1
    assert first_delivery_order(sink.events) == committed
    assert all(relay.stats.delivered > 0 for relay in relays), "the relays did not share work"
    stats = await store.outbox_stats()
    assert (stats.pending, stats.dead, stats.delivered) == (0, 0, 10_000)


async def test_per_thread_order_holds_with_three_relays_and_failures() -> None:
    store = MemoryDurability()
    sink = EventCollector(delay=0.001)
    committed = await commit_workload(store, threads=6, turns=8, per_turn=3)
    flaky = [ids[4] for ids in committed.values()]
    for event_id in flaky:
        sink.script[event_id] = PublishOutcome.retry("flaky")
    relays = [
        OutboxRelay(store, sink, relay_id=f"r{i}", batch_size=7, backoff=FAST, poll_interval=0.01)
        for i in range(3)
    ]

    async def heal() -> None:
        await asyncio.sleep(0.2)
        sink.script.clear()

    healer = asyncio.create_task(heal())
    await run_until_drained(store, relays)
    await healer
    assert first_delivery_order(sink.events) == committed
    assert sum(relay.stats.retried for relay in relays) >= len(flaky)
    assert sink.max_in_flight_per_id == 1


async def test_relay_killed_between_ack_and_mark_redelivers_with_the_same_ids() -> None:
    """A crash after the sink acked (cancelling the task writes nothing more, like kill -9):
    after the claim expires another relay delivers everything; duplicates keep their ids."""
    store = MemoryDurability()
    committed = await commit_workload(store, threads=4, turns=3, per_turn=2)
    sink = EventCollector()
    sink.hold = asyncio.Event()
    doomed = OutboxRelay(store, sink, relay_id="doomed", batch_size=10, claim_ttl=0.3)
    task = asyncio.create_task(doomed.run_once())
    await eventually(lambda: bool(sink.events))
    acked_before_crash = [event.id for event in sink.events]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    sink.hold = None
    survivor = OutboxRelay(store, sink, relay_id="survivor", poll_interval=0.01)
    assert (await survivor.run_once()).claimed == 0  # still claimed by the dead relay
    await asyncio.sleep(0.35)
    await run_until_drained(store, [survivor])
    every_id = {i for ids in committed.values() for i in ids}
    assert set(sink.counts) == every_id
    assert acked_before_crash and all(sink.counts[i] == 2 for i in acked_before_crash)
    assert sum(sink.counts.values()) == len(every_id) + len(acked_before_crash)
    assert first_delivery_order(sink.events) == committed


async def test_relay_killed_mid_publish_loses_nothing() -> None:
    store = MemoryDurability()
    committed = await commit_workload(store, threads=3, turns=2, per_turn=2)
    sink = EventCollector(delay=10)  # the publish never finishes before the crash
    doomed = OutboxRelay(store, sink, relay_id="doomed", claim_ttl=0.2, publish_timeout=0.15)
    task = asyncio.create_task(doomed.run_once())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    sink.delay = 0
    await asyncio.sleep(0.25)
    await run_until_drained(store, [OutboxRelay(store, sink, poll_interval=0.01)])
    assert first_delivery_order(sink.events) == committed
    assert max(sink.counts.values()) == 1


async def test_poison_event_is_dead_lettered_after_n_attempts_while_others_flow() -> None:
    store = MemoryDurability()
    committed = await commit_workload(store, threads=3, turns=2, per_turn=2)
    poison = committed["t1"][1]
    sink = EventCollector()
    sink.script[poison] = PublishOutcome.retry("consumer cannot parse it")
    relay = OutboxRelay(store, sink, max_attempts=4, backoff=FAST, poll_interval=0.01)
    await run_until_drained(store, [relay])
    dead = await relay.dead_letters()
    assert [(d.event.id, d.attempts, d.dead) for d in dead] == [(poison, 4, True)]
    assert dead[0].last_error == "[SINK_FAILED] consumer cannot parse it"
    assert sink.attempts[poison] == 4 and poison not in sink.counts
    # Other threads flowed; the poison's thread waits behind it, so it stays in order.
    delivered = first_delivery_order(sink.events)
    assert delivered["t0"] == committed["t0"] and delivered["t2"] == committed["t2"]
    assert delivered["t1"] == committed["t1"][:1]
    assert relay.stats.dead_lettered == 1 and relay.stats.retried == 3
    assert (await relay.outbox_stats()).blocked_threads == 1
    # An operator fixes the consumer and re-queues: the event goes out with the same id, and
    # the thread resumes in commit order.
    del sink.script[poison]
    assert await relay.requeue(thread_id="t1") == 1
    await run_until_drained(store, [OutboxRelay(store, sink, poll_interval=0.01)])
    assert sink.counts[poison] == 1
    assert first_delivery_order(sink.events) == committed
    stats = await relay.outbox_stats()
    assert (stats.dead, stats.blocked_threads, stats.pending) == (0, 0, 0)


async def test_permanent_rejection_dead_letters_at_once_with_the_reason() -> None:
    store = MemoryDurability()
    await commit_events(store, "t1", "turn-1", 2)
    first = (await store.read_outbox())[0].event.id
    sink = EventCollector()
    sink.script[first] = PublishOutcome.reject("HTTP 422")
    relay = OutboxRelay(store, sink, max_attempts=10, poll_interval=0.01)
    report = await relay.run_once()
    assert (report.dead_lettered, report.released, report.delivered) == (1, 1, 0)
    dead = await relay.dead_letters()
    assert [(d.event.id, d.attempts, d.last_error) for d in dead] == [
        (first, 1, "[SINK_REJECTED] HTTP 422")
    ]
    assert (await relay.run_once()).claimed == 0  # the thread waits behind its dead event
    assert await relay.requeue() == 1
    del sink.script[first]
    assert (await relay.run_once()).delivered == 2


async def test_sink_outage_pauses_the_relay_without_charging_attempts() -> None:
    store = MemoryDurability()
    committed = await commit_workload(store, threads=5, turns=2, per_turn=2)
    sink = EventCollector()
    sink.down = "connection refused"
    relay = OutboxRelay(
        store,
        sink,
        max_attempts=2,
        backoff=Backoff(initial=0.02, maximum=0.1, jitter=0.0),
        poll_interval=0.01,
    )
    task = asyncio.create_task(relay.run())
    await asyncio.sleep(0.4)
    assert relay.stats.sink_outages >= 3
    assert relay.stats.last_error == "[SINK_UNAVAILABLE] connection refused"
    assert relay.stats.delivered == 0
    outbox = await store.read_outbox()
    assert all(e.attempts == 0 and not e.dead for e in outbox)
    assert (await store.outbox_stats()).claimed == 0  # the batch was released
    assert not task.done()
    sink.down = None
    await run_until_drained(store, [relay])
    relay.stop()
    await task
    assert first_delivery_order(sink.events) == committed
    assert (await store.outbox_stats()).dead == 0


async def test_graceful_stop_finishes_the_round_and_releases_the_rest() -> None:
    store = MemoryDurability()
    await commit_events(store, "t1", "turn-1", 5)
    sink = EventCollector()
    sink.hold = asyncio.Event()
    relay = OutboxRelay(store, sink, relay_id="r1", claim_ttl=60)
    task = asyncio.create_task(relay.run())
    await eventually(lambda: bool(sink.events))
    relay.stop()
    sink.hold.set()
    await asyncio.wait_for(task, 5)
    outbox = await store.read_outbox()
    assert [e.delivered_at is not None for e in outbox] == [True, False, False, False, False]
    assert (await store.outbox_stats()).claimed == 0  # no wait for the 60 s claim
    sink.hold = None
    other = OutboxRelay(store, sink, relay_id="r2")
    assert (await other.run_once()).delivered == 4


async def test_a_hanging_sink_times_out_as_unavailable() -> None:
    store = MemoryDurability()
    await commit_events(store, "t1", "turn-1", 1)
    sink = EventCollector(delay=5)
    relay = OutboxRelay(store, sink, claim_ttl=0.6, publish_timeout=0.1)
    report = await relay.run_once()
    assert report.sink_unavailable and report.released == 1
    assert relay.stats.last_error is not None and "did not answer" in relay.stats.last_error


class SlowClaims:
    """A real store whose claims answer ``delay`` seconds late, as a claim under a bad plan did."""

    def __init__(self, store: MemoryDurability, delay: float) -> None:
        self.store = store
        self.delay = delay
        self.claims = 0

    async def claim(
        self, relay_id: str, *, limit: int, lease: float, partitions: Partitions | None = None
    ) -> list[StoredEvent]:
        batch = await self.store.claim(relay_id, limit=limit, lease=lease, partitions=partitions)
        self.claims += 1
        await asyncio.sleep(self.delay)
        return batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_a_claim_slower_than_the_lease_budget_is_reported_not_spun_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A claim that uses up the lease's publishing time cannot publish safely: the batch goes
    back, and the report, the stats and a warning say why (it used to go back silently, and
    the relay claimed it again at once, forever)."""
    store = MemoryDurability()
    await commit_events(store, "t1", "turn-1", 2)
    source = SlowClaims(store, delay=0.8)
    sink = EventCollector()
    relay = OutboxRelay(source, sink, claim_ttl=1.0, publish_timeout=0.2, backoff=FAST)
    report = await relay.run_once()
    assert (report.claimed, report.delivered, report.released) == (2, 0, 2)
    assert "claim of 2 events took 0.8s" in (relay.stats.last_error or "")
    assert report.slow_claim and not report.sink_unavailable
    assert relay.stats.slow_claims == 1
    assert any("raise claim_ttl" in r.getMessage() for r in caplog.records)
    assert (await store.outbox_stats()).claimed == 0  # given back at once, not left to expire
    source.delay = 0.0
    report = await relay.run_once()
    assert report.delivered == 2 and not report.slow_claim
    assert len(sink.events) == 2


async def test_wake_delivers_without_waiting_for_the_poll_interval() -> None:
    store = MemoryDurability()
    sink = EventCollector()
    relay = OutboxRelay(store, sink, poll_interval=30)
    task = asyncio.create_task(relay.run())
    await asyncio.sleep(0.05)
    await commit_events(store, "t1", "turn-1", 1)
    relay.wake()
    await eventually(lambda: bool(sink.events), within=1)
    relay.stop()
    await asyncio.wait_for(task, 2)
    assert len(sink.events) == 1


async def test_a_store_notifier_wakes_the_relay() -> None:
    class NotifyingStore(MemoryDurability):
        def __init__(self) -> None:
            super().__init__()
            self.committed = asyncio.Event()

        async def wait_for_events(self, max_wait: float) -> None:
            await self.committed.wait()
            self.committed.clear()

    store = NotifyingStore()
    sink = EventCollector()
    relay = OutboxRelay(store, sink, poll_interval=30)
    task = asyncio.create_task(relay.run())
    await asyncio.sleep(0.05)
    await commit_events(store, "t1", "turn-1", 1)
    store.committed.set()
    await eventually(lambda: bool(sink.events), within=1)
    relay.stop()
    await asyncio.wait_for(task, 2)
    assert len(sink.events) == 1


async def test_prune_through_the_relay_keeps_pending_and_dead() -> None:
    store = MemoryDurability()
    await commit_workload(store, threads=2, turns=1, per_turn=2)
    sink = EventCollector()
    poison = (await store.read_outbox(thread_id="t0"))[0].event.id
    sink.script[poison] = PublishOutcome.reject("no")
    relay = OutboxRelay(store, sink)
    await relay.run_once()
    await relay.run_once()
    await asyncio.sleep(0.02)
    assert await relay.prune(0.01) == 2  # t1's events; t0 waits behind its dead event
    left = await store.read_outbox()
    assert [(e.event.thread_id, e.dead, e.delivered_at) for e in left] == [
        ("t0", True, None),
        ("t0", False, None),
    ]
    assert left[0].event.id == poison


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_size": 0},
        {"claim_ttl": 0},
        {"max_attempts": 0},
        {"poll_interval": -1},
        {"claim_ttl": 1, "publish_timeout": 2},
    ],
)
def test_bad_relay_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        OutboxRelay(MemoryDurability(), EventCollector(), **kwargs)  # type: ignore[arg-type]
    assert caught.value.code == ErrorCode.INVALID_CONFIGURATION


def test_backoff_grows_and_is_capped() -> None:
    backoff = Backoff(initial=1, maximum=10, jitter=0)
    assert [backoff.delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    jittered = Counter(round(Backoff(jitter=0.5).delay(3), 3) for _ in range(20))
    assert len(jittered) > 1
    with pytest.raises(ConfigurationError):
        Backoff(initial=5, maximum=1)


class StoreOutage:
    """Fault injection: the store's ``claim`` fails ``failures`` times, then recovers."""

    def __init__(self, store: MemoryDurability, failures: int) -> None:
        self.store = store
        self.failures = failures

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def claim(self, relay_id: str, *, limit: int, lease: float) -> list[StoredEvent]:
        if self.failures:
            self.failures -= 1
            raise DurabilityError("store unavailable", code=ErrorCode.STORE_UNAVAILABLE)
        return await self.store.claim(relay_id, limit=limit, lease=lease)


async def test_a_store_outage_backs_off_instead_of_crashing() -> None:
    store = MemoryDurability()
    committed = await commit_workload(store, threads=2, turns=2, per_turn=2)
    sink = EventCollector()
    source = StoreOutage(store, failures=3)
    relay = OutboxRelay(source, sink, backoff=FAST, poll_interval=0.01)  # type: ignore[arg-type]
    await run_until_drained(store, [relay])
    assert relay.stats.source_errors == 3
    assert first_delivery_order(sink.events) == committed
