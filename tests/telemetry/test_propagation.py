"""The turn's trace crosses the outbox: the relay sends each event's ``traceparent`` on (NATS
and webhook headers, a Redis stream field) and a consumer's span joins the turn's trace."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping

import nats
import nats.js.errors
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from intention_kernel.relay import OutboxRelay, open_sink
from intention_kernel.testing import MemoryDurability

from ..relay._net import require_service
from ..relay._support import FAST
from ..relay.test_webhook_sink import SECRET, Receiver
from .conftest import Traced, make_desk


async def traced_turn(traced: Traced) -> tuple[MemoryDurability, ReadableSpan]:
    """One committed, traced turn on a memory store; its outbox holds its events."""
    store = MemoryDurability()
    desk = make_desk(store, traced)
    await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    [turn] = [s for s in traced.spans() if s.name == "ik.turn"]
    return store, turn


def consume(traced: Traced, headers: Mapping[str, str]) -> ReadableSpan:
    """What a consumer does: continue the trace from the message's headers."""
    context = TraceContextTextMapPropagator().extract(dict(headers))
    tracer = traced.provider.get_tracer("consumer")
    with tracer.start_as_current_span("handle event", context=context):
        pass
    return [s for s in traced.spans() if s.name == "handle event"][-1]


def joins(consumer: ReadableSpan, turn: ReadableSpan) -> bool:
    return (
        consumer.context is not None
        and turn.context is not None
        and consumer.parent is not None
        and consumer.context.trace_id == turn.context.trace_id
        and consumer.parent.span_id == turn.context.span_id
    )


async def relay_all(store: MemoryDurability, url: str) -> int:
    sink = open_sink(url)
    relay = OutboxRelay(store, sink, relay_id="r1", backoff=FAST)
    try:
        report = await relay.run_once()
    finally:
        await sink.close()
    return report.delivered


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    monkeypatch.setenv("IK_WEBHOOK_SECRET", SECRET)
    server = Receiver()
    server.start()
    yield server
    server.stop()


async def test_webhook_requests_carry_the_traceparent_header(
    traced: Traced, receiver: Receiver
) -> None:
    store, turn = await traced_turn(traced)
    delivered = await relay_all(store, receiver.sink_url())
    assert delivered == len(receiver.requests) > 0
    for headers, _ in receiver.requests:
        lowered = {k.lower(): v for k, v in headers.items()}
        assert joins(consume(traced, lowered), turn)


@pytest.fixture
async def jetstream() -> AsyncIterator[tuple[Client, str, str]]:
    require_service(4222, "nats-server")
    nc = await nats.connect("nats://127.0.0.1:4222")
    token = uuid.uuid4().hex[:12]
    subject, stream = f"ik.otel.{token}", f"IK_OTEL_{token}"
    try:
        yield nc, subject, stream
    finally:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await nc.jetstream().delete_stream(stream)
        await nc.close()


async def test_nats_messages_carry_the_traceparent_header(
    traced: Traced, jetstream: tuple[Client, str, str]
) -> None:
    nc, subject, stream = jetstream
    store, turn = await traced_turn(traced)
    delivered = await relay_all(store, f"nats://127.0.0.1:4222/{subject}?stream={stream}")
    js = nc.jetstream()
    info = await js.stream_info(stream)
    assert info.state.messages == delivered > 0
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(stream, seq)
        assert msg.headers is not None
        assert joins(consume(traced, msg.headers), turn)


@pytest.fixture
async def redis_stream() -> AsyncIterator[tuple[aioredis.Redis, str]]:
    require_service(6379, "redis-server")
    client = aioredis.Redis(host="127.0.0.1", port=6379)
    stream = f"ik-otel-{uuid.uuid4().hex[:12]}"
    try:
        yield client, stream
    finally:
        await client.delete(stream)
        await client.aclose()


async def test_redis_entries_carry_the_traceparent_field(
    traced: Traced, redis_stream: tuple[aioredis.Redis, str]
) -> None:
    client, stream = redis_stream
    store, turn = await traced_turn(traced)
    delivered = await relay_all(store, f"redis://127.0.0.1:6379/0?stream={stream}")
    entries: list[tuple[bytes, dict[bytes, bytes]]] = await client.xrange(stream)  # type: ignore[assignment]
    assert len(entries) == delivered > 0
    for _, fields in entries:
        decoded = {k.decode(): v.decode() for k, v in fields.items()}
        assert joins(consume(traced, decoded), turn)


async def test_untraced_events_send_no_traceparent(
    traced: Traced, receiver: Receiver, redis_stream: tuple[aioredis.Redis, str]
) -> None:
    store = MemoryDurability()
    desk = make_desk(store, None)  # no SDK: nothing to continue
    await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    await relay_all(store, receiver.sink_url())
    assert receiver.requests
    assert all("traceparent" not in {k.lower() for k in h} for h, _ in receiver.requests)
    client, stream = redis_stream
    sink = open_sink(f"redis://127.0.0.1:6379/0?stream={stream}")
    try:  # the same (already delivered) events, published directly
        events = [stored.event for stored in await store.read_outbox()]
        assert all(o.kind == "ok" for o in await sink.publish(events))
    finally:
        await sink.close()
    entries: list[tuple[bytes, dict[bytes, bytes]]] = await client.xrange(stream)  # type: ignore[assignment]
    assert len(entries) == len(events)
    assert all(b"traceparent" not in fields for _, fields in entries)
