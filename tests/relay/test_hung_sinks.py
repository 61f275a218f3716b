"""A sink that hangs (the connection stays open, no answer comes) is an outage, not a poison
event: however long it lasts, nothing is dead-lettered, and the backlog drains in order once the
peer answers again. Each broker is a private instance the test SIGSTOPs; the webhook receiver
sits behind a proxy that accepts requests and never answers."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import nats
import pytest
import redis.asyncio as aioredis

from intention_kernel.contracts import KernelEvent
from intention_kernel.relay import Backoff, EventSink, OutboxRelay, open_sink
from intention_kernel.testing import MemoryDurability

from ._net import PrivateServer, StallingProxy
from ._support import commit_workload, eventually, first_delivery_order, run_until_drained
from .test_nats_sink import stored_events
from .test_redis_sink import read_stream
from .test_webhook_sink import SECRET, Receiver

MAX_ATTEMPTS = 2
BACKOFF = Backoff(initial=0.05, maximum=0.1, jitter=0.0)
SINK_TIMEOUT = 0.3
HANG = 2.0
"""Seconds the peer hangs: several times ``MAX_ATTEMPTS x (SINK_TIMEOUT + backoff)``, after
which a relay that counted timeouts as attempts has dead-lettered every thread."""


async def hang_then_recover(
    sink: EventSink,
    hang: Callable[[], None],
    recover: Callable[[], None],
    delivered: Callable[[], Awaitable[list[KernelEvent]]],
) -> OutboxRelay:
    """Deliver a first backlog, hang the peer for ``HANG`` seconds while more commits queue,
    check nothing died, then let it answer and check the whole outbox drains in order."""
    store = MemoryDurability()
    await commit_workload(store, threads=4, turns=1, per_turn=2, prefix="a")
    relay = OutboxRelay(
        store,
        sink,
        max_attempts=MAX_ATTEMPTS,
        backoff=BACKOFF,
        claim_ttl=6.0,
        publish_timeout=2.0,
        poll_interval=0.01,
    )
    task = asyncio.create_task(relay.run())
    try:
        await eventually(lambda: relay.stats.delivered == 8, within=15)
        hang()
        await commit_workload(store, threads=4, turns=3, per_turn=2, prefix="b")
        relay.wake()
        await asyncio.sleep(HANG)
        stats = await store.outbox_stats()
        assert (stats.dead, relay.stats.dead_lettered, relay.stats.retried) == (0, 0, 0), (
            relay.stats
        )
        assert relay.stats.sink_outages >= 3
        assert stats.pending == 24
        assert "within" in (relay.stats.last_error or ""), relay.stats.last_error
        recover()
        await run_until_drained(store, [relay], running=[task], within=30)
    finally:
        relay.stop()
        await asyncio.wait_for(task, 10)
        await sink.close()
    stats = await store.outbox_stats()
    assert (stats.pending, stats.dead, stats.delivered) == (0, 0, 32)
    committed: dict[str, list[str]] = {}
    for stored in await store.read_outbox(limit=100):
        committed.setdefault(stored.event.thread_id, []).append(stored.event.id)
    assert first_delivery_order(await delivered()) == committed
    return relay


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[PrivateServer]:
    server = PrivateServer.nats(str(tmp_path / "jetstream"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_server() -> Iterator[PrivateServer]:
    server = PrivateServer.redis()
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def stalling_receiver(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[StallingProxy]:
    monkeypatch.setenv("IK_WEBHOOK_SECRET", SECRET)
    receiver = Receiver()
    receiver.start()
    proxy = StallingProxy(receiver.port)
    proxy.receiver = receiver  # type: ignore[attr-defined]
    await proxy.start()
    yield proxy
    proxy.unstall()
    await proxy.stop()
    receiver.stop()


async def test_a_hung_nats_server_dead_letters_nothing(nats_server: PrivateServer) -> None:
    subject, stream = "ik.hung.events", "IK_HUNG"
    sink = open_sink(
        f"nats://127.0.0.1:{nats_server.port}/{subject}?stream={stream}&timeout={SINK_TIMEOUT}"
    )

    async def delivered() -> list[KernelEvent]:
        nc = await nats.connect(f"nats://127.0.0.1:{nats_server.port}")
        try:
            return await stored_events(nc.jetstream(), stream)
        finally:
            await nc.close()

    relay = await hang_then_recover(sink, nats_server.pause, nats_server.resume, delivered)
    assert "did not acknowledge" in " ".join(relay.stats.recent)


async def test_a_hung_redis_server_dead_letters_nothing(redis_server: PrivateServer) -> None:
    stream = f"ik:hung:{uuid.uuid4().hex[:8]}"
    sink = open_sink(
        f"redis://127.0.0.1:{redis_server.port}/0?stream={stream}&timeout={SINK_TIMEOUT}"
    )

    async def delivered() -> list[KernelEvent]:
        client = aioredis.Redis(host="127.0.0.1", port=redis_server.port)
        try:
            return await read_stream(client, stream)
        finally:
            await client.aclose()

    relay = await hang_then_recover(sink, redis_server.pause, redis_server.resume, delivered)
    assert "Redis did not answer" in " ".join(relay.stats.recent)


async def test_a_webhook_that_never_answers_dead_letters_nothing(
    stalling_receiver: StallingProxy,
) -> None:
    receiver: Receiver = stalling_receiver.receiver  # type: ignore[attr-defined]
    sink = open_sink(
        f"webhook+http://127.0.0.1:{stalling_receiver.port}/hooks/events"
        f"?secret_env=IK_WEBHOOK_SECRET&timeout={SINK_TIMEOUT}"
    )

    async def delivered() -> list[KernelEvent]:
        return receiver.events

    relay = await hang_then_recover(
        sink, stalling_receiver.stall, stalling_receiver.unstall, delivered
    )
    assert stalling_receiver.held >= 3  # the requests were taken and never answered
    assert "webhook did not answer" in " ".join(relay.stats.recent)
    with contextlib.suppress(Exception):
        await sink.close()
