"""The NATS JetStream sink against the local nats-server (loopback)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence

import nats
import nats.js.errors
import pytest
from nats.js import JetStreamContext

from intention_kernel.contracts import KernelEvent
from intention_kernel.relay import (
    Backoff,
    EventSink,
    OutboxRelay,
    OutcomeKind,
    PublishOutcome,
    open_sink,
)
from intention_kernel.relay.sinks._nats import NatsSink
from intention_kernel.testing import MemoryDurability

from ._net import TcpProxy, require_service
from ._support import commit_workload, eventually, first_delivery_order, run_until_drained

NATS_PORT = 4222


@pytest.fixture
async def jetstream() -> AsyncIterator[tuple[JetStreamContext, str, str]]:
    """A JetStream context plus a unique (subject, stream); the stream is deleted afterwards."""
    require_service(NATS_PORT, "nats-server")
    nc = await nats.connect(f"nats://127.0.0.1:{NATS_PORT}")
    token = uuid.uuid4().hex[:12]
    subject, stream = f"ik.test.{token}", f"IK_TEST_{token}"
    try:
        yield nc.jetstream(), subject, stream
    finally:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await nc.jetstream().delete_stream(stream)
        await nc.close()


async def stored_events(js: JetStreamContext, stream: str) -> list[KernelEvent]:
    info = await js.stream_info(stream)
    events = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(stream, seq)
        event = KernelEvent.model_validate_json(msg.data or b"")
        assert msg.headers is not None and msg.headers["Nats-Msg-Id"] == event.id
        events.append(event)
    return events


async def test_nats_stream_is_created_and_deduplicates_by_event_id(
    jetstream: tuple[JetStreamContext, str, str],
) -> None:
    js, subject, stream = jetstream
    store = MemoryDurability()
    await commit_workload(store, threads=2, turns=1, per_turn=3)
    events = [e.event for e in await store.read_outbox()]
    sink = open_sink(f"nats://127.0.0.1:{NATS_PORT}/{subject}?stream={stream}&dedupe_window=60")
    try:
        first = await sink.publish(events)
        again = await sink.publish(events)  # a re-delivery after a crash: same ids
    finally:
        await sink.close()
    assert {o.kind for o in first + again} == {OutcomeKind.OK}
    info = await js.stream_info(stream)
    assert info.config.subjects == [subject]
    assert info.state.messages == len(events)
    assert [e.id for e in await stored_events(js, stream)] == [e.id for e in events]


async def test_nats_three_relays_keep_per_thread_order(
    jetstream: tuple[JetStreamContext, str, str],
) -> None:
    js, subject, stream = jetstream
    store = MemoryDurability()
    committed = await commit_workload(store, threads=10, turns=10, per_turn=3)
    sink = open_sink(f"nats://127.0.0.1:{NATS_PORT}/{subject}?stream={stream}")
    relays = [
        OutboxRelay(store, sink, relay_id=f"r{i}", batch_size=25, poll_interval=0.01)
        for i in range(3)
    ]
    try:
        await run_until_drained(store, relays)
    finally:
        await sink.close()
    events = await stored_events(js, stream)
    assert len(events) == 300
    assert first_delivery_order(events) == committed
    assert sum(1 for r in relays if r.stats.delivered) >= 2


async def test_nats_down_then_up_drains_the_backlog(
    jetstream: tuple[JetStreamContext, str, str],
) -> None:
    js, subject, stream = jetstream
    store = MemoryDurability()
    committed = await commit_workload(store, threads=5, turns=4, per_turn=2)
    proxy = TcpProxy(NATS_PORT)  # not started yet: the port refuses connections
    sink = open_sink(f"nats://127.0.0.1:{proxy.port}/{subject}?stream={stream}&timeout=1")
    relay = OutboxRelay(
        store,
        sink,
        max_attempts=2,
        backoff=Backoff(initial=0.05, maximum=0.2, jitter=0.0),
        poll_interval=0.01,
    )
    task = asyncio.create_task(relay.run())
    try:
        await eventually(lambda: relay.stats.sink_outages >= 3, within=10)
        assert relay.stats.delivered == 0
        assert "NATS unreachable" in (relay.stats.last_error or "")
        await proxy.start()
        await run_until_drained(store, [relay], running=[task])
    finally:
        relay.stop()
        await proxy.stop()
        await sink.close()
    assert (await store.outbox_stats()).dead == 0
    assert first_delivery_order(await stored_events(js, stream)) == committed


async def test_nats_broker_lost_mid_run_then_back(
    jetstream: tuple[JetStreamContext, str, str],
) -> None:
    js, subject, stream = jetstream
    store = MemoryDurability()
    proxy = TcpProxy(NATS_PORT)
    await proxy.start()
    sink = open_sink(f"nats://127.0.0.1:{proxy.port}/{subject}?stream={stream}&timeout=1")
    await commit_workload(store, threads=3, turns=1, per_turn=2, prefix="a")
    relay = OutboxRelay(store, sink, backoff=Backoff(initial=0.05, maximum=0.2), poll_interval=0.01)
    try:
        assert (await relay.run_once()).delivered == 6
        await proxy.stop()
        committed = await commit_workload(store, threads=3, turns=2, per_turn=2, prefix="b")
        report = await relay.run_once()
        assert report.sink_unavailable and report.delivered == 0
        await proxy.start()
        await run_until_drained(store, [relay])
    finally:
        await proxy.stop()
        await sink.close()
    delivered = first_delivery_order(await stored_events(js, stream))
    assert all(delivered[t] == ids for t, ids in committed.items() if t.startswith("b"))


async def test_nats_subject_owned_by_another_stream_is_reported(
    jetstream: tuple[JetStreamContext, str, str],
) -> None:
    js, subject, stream = jetstream
    await js.add_stream(name=stream, subjects=[subject])
    store = MemoryDurability()
    await commit_workload(store, threads=1, turns=1, per_turn=1)
    sink = NatsSink(f"nats://127.0.0.1:{NATS_PORT}", subject, f"{stream}_OTHER")
    try:
        outcomes = await sink.publish([e.event for e in await store.read_outbox()])
    finally:
        await sink.close()
    assert outcomes[0].kind is OutcomeKind.UNAVAILABLE
    assert "another stream" in outcomes[0].reason


class AckThenHang:
    """Publishes through the real NATS sink, then hangs once: a relay dying after the broker
    acknowledged a batch but before it was marked delivered."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self.published: Counter[str] = Counter()
        self.hang = True

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        outcomes = await self.sink.publish(events)
        self.published.update(e.id for e, o in zip(events, outcomes, strict=True) if o.kind == "ok")
        if self.hang:
            await asyncio.Event().wait()
        return outcomes

    async def close(self) -> None:
        await self.sink.close()


async def test_nats_relay_killed_after_ack_redelivers_and_the_stream_dedupes(
    jetstream: tuple[JetStreamContext, str, str],
) -> None:
    js, subject, stream = jetstream
    store = MemoryDurability()
    committed = await commit_workload(store, threads=4, turns=3, per_turn=2)
    sink = AckThenHang(open_sink(f"nats://127.0.0.1:{NATS_PORT}/{subject}?stream={stream}"))
    doomed = OutboxRelay(store, sink, relay_id="doomed", claim_ttl=0.3)
    task = asyncio.create_task(doomed.run_once())
    try:
        await eventually(lambda: bool(sink.published))
        task.cancel()  # like kill -9: nothing more is written, the claim has to expire
        with pytest.raises(asyncio.CancelledError):
            await task
        acked_before_crash = set(sink.published)
        sink.hang = False
        await asyncio.sleep(0.35)
        await run_until_drained(store, [OutboxRelay(store, sink, poll_interval=0.01)])
    finally:
        await sink.close()
    assert all(sink.published[i] == 2 for i in acked_before_crash)  # re-published, same id
    events = await stored_events(js, stream)
    assert len(events) == 24 and len({e.id for e in events}) == 24  # stored once each
    assert first_delivery_order(events) == committed
