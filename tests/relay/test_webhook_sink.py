"""The webhook sink against a local HTTP receiver that checks signatures (loopback)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from intention_kernel.contracts import ConfigurationError, KernelEvent
from intention_kernel.relay import Backoff, OutboxRelay, open_sink
from intention_kernel.relay.signing import ID_HEADER, new_secret, signature_headers
from intention_kernel.testing import MemoryDurability

from ._net import free_port
from ._support import FAST, commit_workload, eventually, first_delivery_order, run_until_drained

SECRET = new_secret()


class Receiver:
    """A webhook endpoint on 127.0.0.1 that verifies every request like a real consumer: with
    the reference Standard Webhooks verifier, deduplicating on the signed id."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.events: list[KernelEvent] = []
        self.refused = 0
        self.duplicates = 0
        self.status_for: dict[str, int] = {}
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self._server: ThreadingHTTPServer | None = None
        self._seen: set[str] = set()
        verifier = Webhook(SECRET)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = dict(self.headers.items())
                try:
                    verifier.verify(body, headers)
                except WebhookVerificationError:
                    receiver.refused += 1
                    self._answer(401)
                    return
                receiver.requests.append((headers, body))
                event = KernelEvent.model_validate_json(body)
                assert self.headers[ID_HEADER] == event.id
                status = receiver.status_for.get(event.id, 204)
                if status < 300:
                    if event.id in receiver._seen:
                        receiver.duplicates += 1
                    else:
                        receiver._seen.add(event.id)
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


async def test_receiver_rejects_a_tampered_body_and_another_id(receiver: Receiver) -> None:
    body = b'{"id":"evt_1","amount":10}'
    headers = signature_headers(SECRET, "evt_1", body)
    async with httpx.AsyncClient() as client:
        tampered = await client.post(
            receiver.url, content=body.replace(b"10", b"99"), headers=headers
        )
        other_id = await client.post(
            receiver.url, content=body, headers={**headers, ID_HEADER: "evt_2"}
        )
        wrong_secret = await client.post(
            receiver.url, content=body, headers=signature_headers(new_secret(), "evt_1", body)
        )
        unsigned = await client.post(receiver.url, content=body)
    statuses = [r.status_code for r in (tampered, other_id, wrong_secret, unsigned)]
    assert statuses == [401, 401, 401, 401]
    assert receiver.refused == 4 and receiver.events == []


async def test_a_replayed_delivery_is_deduplicated_by_its_signed_id(receiver: Receiver) -> None:
    store = MemoryDurability()
    await commit_workload(store, threads=1, turns=1, per_turn=1)
    sink = open_sink(receiver.sink_url())
    try:
        await run_until_drained(store, [OutboxRelay(store, sink, poll_interval=0.01)])
    finally:
        await sink.close()
    [(headers, body)] = receiver.requests
    async with httpx.AsyncClient() as client:
        replay = await client.post(receiver.url, content=body, headers=headers)
        renamed = await client.post(
            receiver.url, content=body, headers={**headers, ID_HEADER: "evt_new"}
        )
    assert (replay.status_code, renamed.status_code) == (204, 401)
    assert len(receiver.events) == 1 and receiver.duplicates == 1


@pytest.mark.parametrize(
    ("secret", "accepted"),
    [
        (None, False),
        ("", False),
        ("plain-text-secret", False),
        ("whsec_", False),
        ("whsec_%%%", False),
        (SECRET, True),
        (f"{SECRET} {new_secret()}", True),  # rotation: signed with both
    ],
)
def test_the_webhook_secret_must_be_a_standard_one(
    monkeypatch: pytest.MonkeyPatch, secret: str | None, accepted: bool
) -> None:
    if secret is None:
        monkeypatch.delenv("IK_HOOK_SECRET_T", raising=False)
    else:
        monkeypatch.setenv("IK_HOOK_SECRET_T", secret)
    url = "webhook+https://hooks.example/events?secret_env=IK_HOOK_SECRET_T"
    if accepted:
        assert open_sink(url) is not None
        return
    with pytest.raises(ConfigurationError) as caught:
        open_sink(url)
    assert caught.value.context.get("secret_env") == "IK_HOOK_SECRET_T"
    assert not secret or secret == "whsec_" or secret not in str(caught.value.to_json())


async def test_rotation_signs_with_every_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    old = new_secret()
    monkeypatch.setenv("IK_WEBHOOK_SECRET", f"{SECRET} {old}")
    receiver = Receiver()
    receiver.start()
    old_receiver = Webhook(old)
    try:
        store = MemoryDurability()
        await commit_workload(store, threads=1, turns=1, per_turn=1)
        sink = open_sink(receiver.sink_url())
        try:
            await run_until_drained(store, [OutboxRelay(store, sink, poll_interval=0.01)])
        finally:
            await sink.close()
    finally:
        receiver.stop()
    [(headers, body)] = receiver.requests
    assert len(headers["webhook-signature"].split(" ")) == 2
    old_receiver.verify(body, headers)  # a receiver still on the old secret accepts it too


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
