"""The webhook sink against a local HTTP receiver that checks signatures (loopback)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from intention_kernel.contracts import KernelEvent
from intention_kernel.relay import Backoff, OutboxRelay, open_sink, sign, verify_signature
from intention_kernel.relay.signing import EVENT_ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER
from intention_kernel.testing import MemoryDurability

from ._net import free_port
from ._support import FAST, commit_workload, eventually, first_delivery_order, run_until_drained

SECRET = "whsec-test-0123456789"


class Receiver:
    """A webhook endpoint on 127.0.0.1 that verifies every request like a real consumer."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.events: list[KernelEvent] = []
        self.refused = 0
        self.status_for: dict[str, int] = {}
        self._server: ThreadingHTTPServer | None = None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                ok = verify_signature(
                    SECRET,
                    timestamp=self.headers.get(TIMESTAMP_HEADER, ""),
                    body=body,
                    signature=self.headers.get(SIGNATURE_HEADER, ""),
                )
                if not ok:
                    receiver.refused += 1
                    self._answer(401)
                    return
                event = KernelEvent.model_validate_json(body)
                assert self.headers[EVENT_ID_HEADER] == event.id
                status = receiver.status_for.get(event.id, 204)
                if status < 300:
                    receiver.events.append(event)
                self._answer(status)

            def _answer(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._handler = Handler

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/events"

    def sink_url(self) -> str:
        return f"webhook+http://127.0.0.1:{self.port}/hooks/events?secret_env=IK_WEBHOOK_SECRET"

    def start(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    monkeypatch.setenv("IK_WEBHOOK_SECRET", SECRET)
    server = Receiver()
    server.start()
    yield server
    server.stop()


async def test_webhook_delivers_signed_events_in_thread_order_with_three_relays(
    receiver: Receiver,
) -> None:
    store = MemoryDurability()
    committed = await commit_workload(store, threads=6, turns=5, per_turn=2)
    sink = open_sink(receiver.sink_url())
    relays = [
        OutboxRelay(store, sink, relay_id=f"r{i}", batch_size=10, poll_interval=0.01)
        for i in range(3)
    ]
    try:
        await run_until_drained(store, relays)
    finally:
        await sink.close()
    assert receiver.refused == 0
    assert len(receiver.events) == 60
    assert first_delivery_order(receiver.events) == committed


async def test_receiver_rejects_a_tampered_body(receiver: Receiver) -> None:
    body = b'{"id":"evt_1","amount":10}'
    timestamp = str(int(time.time()))
    headers = {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: sign(SECRET, timestamp, body)}
    async with httpx.AsyncClient() as client:
        tampered = await client.post(
            receiver.url, content=body.replace(b"10", b"99"), headers=headers
        )
        wrong_secret = await client.post(
            receiver.url,
            content=body,
            headers={**headers, SIGNATURE_HEADER: sign("other", timestamp, body)},
        )
        unsigned = await client.post(receiver.url, content=body)
    assert (tampered.status_code, wrong_secret.status_code, unsigned.status_code) == (
        401,
        401,
        401,
    )
    assert receiver.refused == 3 and receiver.events == []


def test_verify_signature_checks_secret_body_age_and_rotation() -> None:
    body, now = b'{"a":1}', 1_800_000_000
    stamp = str(now)
    good = sign(SECRET, stamp, body)
    assert good.startswith("v1=")
    assert verify_signature(SECRET, timestamp=stamp, body=body, signature=good, now=now)
    assert not verify_signature(SECRET, timestamp=stamp, body=b'{"a":2}', signature=good, now=now)
    assert not verify_signature("other", timestamp=stamp, body=body, signature=good, now=now)
    assert not verify_signature(SECRET, timestamp=stamp, body=body, signature=good, now=now + 301)
    assert not verify_signature(SECRET, timestamp="soon", body=body, signature=good, now=now)
    assert not verify_signature(SECRET, timestamp=stamp, body=body, signature="", now=now)
    rotated = f"{sign('old-secret', stamp, body)}, {good}"
    assert verify_signature(SECRET, timestamp=stamp, body=body, signature=rotated, now=now)


async def test_webhook_status_codes_map_to_retry_and_dead_letter(receiver: Receiver) -> None:
    store = MemoryDurability()
    committed = await commit_workload(store, threads=3, turns=2, per_turn=1)
    rejected, flaky, throttled = (ids[0] for ids in committed.values())
    receiver.status_for = {rejected: 400, flaky: 503, throttled: 429}
    sink = open_sink(receiver.sink_url())
    relay = OutboxRelay(store, sink, max_attempts=50, backoff=FAST, poll_interval=0.01)
    task = asyncio.create_task(relay.run())
    try:
        await eventually(lambda: relay.stats.retried >= 4, within=10)
        receiver.status_for = {rejected: 400}
        await run_until_drained(store, [relay], running=[task])
    finally:
        relay.stop()
        await sink.close()
    dead = await relay.dead_letters()
    assert [(d.event.id, d.attempts, d.last_error) for d in dead] == [
        (rejected, 1, "[SINK_REJECTED] webhook answered HTTP 400")
    ]
    delivered = first_delivery_order(receiver.events)
    assert "t0" not in delivered  # waits behind its dead-lettered event, in order
    assert delivered["t1"] == committed["t1"] and delivered["t2"] == committed["t2"]
    assert (await relay.outbox_stats()).blocked_threads == 1


async def test_webhook_down_then_up_drains_the_backlog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IK_WEBHOOK_SECRET", SECRET)
    receiver = Receiver()  # not started: connections are refused
    store = MemoryDurability()
    committed = await commit_workload(store, threads=4, turns=3, per_turn=2)
    sink = open_sink(receiver.sink_url())
    relay = OutboxRelay(
        store, sink, max_attempts=2, backoff=Backoff(initial=0.05, maximum=0.2, jitter=0.0)
    )
    task = asyncio.create_task(relay.run())
    try:
        await eventually(lambda: relay.stats.sink_outages >= 3, within=10)
        assert "webhook unreachable" in (relay.stats.last_error or "")
        receiver.start()
        await run_until_drained(store, [relay], running=[task])
    finally:
        relay.stop()
        receiver.stop()
        await sink.close()
    assert (await store.outbox_stats()).dead == 0
    assert first_delivery_order(receiver.events) == committed
