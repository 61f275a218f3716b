"""The Redis Streams sink against the local redis-server (loopback)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from intention_kernel.contracts import KernelEvent
from intention_kernel.relay import Backoff, OutboxRelay, OutcomeKind, open_sink
from intention_kernel.testing import MemoryDurability

from ._net import TcpProxy, require_service
from ._support import commit_workload, eventually, first_delivery_order, run_until_drained

REDIS_PORT = 6379


@pytest.fixture
async def redis_stream() -> AsyncIterator[tuple[aioredis.Redis, str]]:
    require_service(REDIS_PORT, "redis-server")
    client = aioredis.Redis(host="127.0.0.1", port=REDIS_PORT)
    stream = f"ik:test:{uuid.uuid4().hex[:12]}"
    try:
        yield client, stream
    finally:
        await client.delete(stream)
        await client.aclose()


async def read_stream(client: aioredis.Redis, stream: str) -> list[KernelEvent]:
    events = []
    entries: list[tuple[bytes, dict[bytes, bytes]]] = await client.xrange(stream)  # type: ignore[assignment]
    for _, fields in entries:
        event = KernelEvent.model_validate_json(fields[b"event"])
        assert fields[b"id"].decode() == event.id
        assert fields[b"thread_id"].decode() == event.thread_id
        assert int(fields[b"sequence"]) == event.sequence
        events.append(event)
    return events


async def test_redis_xadd_carries_the_event_id_and_does_not_deduplicate(
    redis_stream: tuple[aioredis.Redis, str],
) -> None:
    client, stream = redis_stream
    store = MemoryDurability()
    await commit_workload(store, threads=2, turns=1, per_turn=2)
    events = [e.event for e in await store.read_outbox()]
    sink = open_sink(f"redis://127.0.0.1:{REDIS_PORT}/0?stream={stream}")
    try:
        assert {o.kind for o in await sink.publish(events)} == {OutcomeKind.OK}
        await sink.publish(events[:1])  # a re-delivery: Redis keeps both, consumers dedupe
    finally:
        await sink.close()
    stored = await read_stream(client, stream)
    assert [e.id for e in stored] == [e.id for e in events] + [events[0].id]


async def test_redis_three_relays_keep_per_thread_order(
    redis_stream: tuple[aioredis.Redis, str],
) -> None:
    client, stream = redis_stream
    store = MemoryDurability()
    committed = await commit_workload(store, threads=10, turns=10, per_turn=3)
    sink = open_sink(f"redis://127.0.0.1:{REDIS_PORT}/0?stream={stream}")
    relays = [
        OutboxRelay(store, sink, relay_id=f"r{i}", batch_size=25, poll_interval=0.01)
        for i in range(3)
    ]
    try:
        await run_until_drained(store, relays)
    finally:
        await sink.close()
    events = await read_stream(client, stream)
    assert len(events) == 300 and len({e.id for e in events}) == 300
    assert first_delivery_order(events) == committed


async def test_redis_down_then_up_drains_the_backlog(
    redis_stream: tuple[aioredis.Redis, str],
) -> None:
    client, stream = redis_stream
    store = MemoryDurability()
    committed = await commit_workload(store, threads=5, turns=4, per_turn=2)
    proxy = TcpProxy(REDIS_PORT)
    sink = open_sink(f"redis://127.0.0.1:{proxy.port}/0?stream={stream}&timeout=1")
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
        assert "Redis unreachable" in (relay.stats.last_error or "")
        await proxy.start()
        await run_until_drained(store, [relay], running=[task])
        await proxy.stop()  # the broker goes away mid-run, then comes back
        more = await commit_workload(store, threads=2, turns=2, per_turn=2, prefix="late")
        report = await OutboxRelay(store, sink).run_once()
        assert report.sink_unavailable
        await proxy.start()
        await run_until_drained(store, [OutboxRelay(store, sink, poll_interval=0.01)])
    finally:
        relay.stop()
        await proxy.stop()
        await sink.close()
    assert (await store.outbox_stats()).dead == 0
    delivered = first_delivery_order(await read_stream(client, stream))
    assert {t: delivered[t] for t in committed} == committed
    assert all(delivered[t] == ids for t, ids in more.items() if t.startswith("late"))
