"""Metrics through the SDK's in-memory reader: turns, replays, lease wait, effects, tokens,
receipts waiting for an operator, and the relay's lag and dead letters."""

from __future__ import annotations

from collections.abc import Sequence

from intention_kernel.contracts import KernelEvent, ReceiptStatus
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.relay import EventSink, OutboxRelay, PublishOutcome
from intention_kernel.telemetry import UncertainReceipts
from intention_kernel.testing import MemoryDurability
from intention_kernel.testing.conformance.outbox import commit_events

from ..relay._support import FAST
from .conftest import MODEL, Measured, Traced, make_desk


async def test_turn_effect_token_and_lease_metrics(
    store: SQLiteDurability, traced: Traced, measured: Measured
) -> None:
    desk = make_desk(store, traced, measured)
    held = await desk.held_booking()
    await desk.confirm(held)
    again = await desk.confirm(held)  # the same turn delivered again: a replay
    assert again.replayed

    durations = measured.points("ik.turn.duration")
    by_outcome = {a["ik.turn.outcome"]: p.count for a, p in durations}
    assert by_outcome == {"committed": 4, "replayed": 1}
    assert all(a["ik.agent.id"] == "travel-desk" for a, _ in durations)
    [(replay_attrs, replays)] = measured.points("ik.turn.replays")
    assert replays.value == 1 and replay_attrs == {"ik.agent.id": "travel-desk"}

    [(lease_attrs, lease)] = measured.points("ik.lease.wait")
    assert lease_attrs == {"ik.agent.id": "travel-desk", "db.system.name": "sqlite"}
    assert lease.count == 5 and lease.sum > 0

    [(effect_attrs, effects)] = measured.points("ik.effects")
    assert effect_attrs == {"ik.capability.id": "hotels.book", "ik.receipt.status": "completed"}
    assert effects.value == 1

    tokens = {
        (a["ik.model.task"], a["gen_ai.token.type"]): p
        for a, p in measured.points("gen_ai.client.token.usage")
    }
    # Three interpreted turns (search, quote, "Book it") and four composed answers.
    assert tokens["interpret", "input"].sum == 3 * 120
    assert tokens["interpret", "output"].sum == 3 * 30
    assert tokens["compose", "input"].count == 4
    for attrs, _ in measured.points("gen_ai.client.token.usage"):
        assert attrs["gen_ai.request.model"] == MODEL
        assert attrs["gen_ai.provider.name"] == "acme-ai"


async def test_metrics_flow_without_a_tracer(store: SQLiteDurability, measured: Measured) -> None:
    desk = make_desk(store, None, measured)  # spans off (no SDK tracer), metrics on
    held = await desk.held_booking()
    await desk.confirm(held)
    [(_, effects)] = measured.points("ik.effects")
    assert effects.value == 1
    assert sum(p.count for _, p in measured.points("ik.turn.duration")) == 4


async def test_uncertain_receipts_gauge_reads_the_store(
    store: SQLiteDurability, measured: Measured
) -> None:
    gauge = UncertainReceipts(store, meter_provider=measured.provider)
    assert measured.points("ik.receipts.uncertain") == []  # nothing read yet: nothing reported
    assert await gauge.refresh() == 0
    desk = make_desk(store, None, measured)
    held = await desk.held_booking()
    desk.hotels.lose_next_response = True
    lost = await desk.confirm(held)
    assert "being verified" in lost.response.text
    assert await gauge.refresh() == 1
    [(_, point)] = measured.points("ik.receipts.uncertain")
    assert point.value == 1
    [(_, effects)] = measured.points("ik.effects")
    assert effects.value == 1
    [(attrs, _)] = measured.points("ik.effects")
    assert attrs["ik.receipt.status"] == "uncertain"
    [receipt] = await store.list_receipts(status=ReceiptStatus.UNCERTAIN)
    [booking] = desk.hotels.bookings.values()
    await store.reconcile(
        "t1", receipt.idempotency_key, "completed", value=booking, note="found", actor="ops"
    )
    assert await gauge.refresh() == 0  # reconciled elsewhere: the store says so
    [(_, point)] = measured.points("ik.receipts.uncertain")
    assert point.value == 0


class Refusing:
    """A sink that refuses every event (a receiver answering 4xx)."""

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        return [PublishOutcome.reject("HTTP 404")] * len(events)

    async def close(self) -> None:
        return None


class Accepting:
    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        return [PublishOutcome.ok()] * len(events)

    async def close(self) -> None:
        return None


async def test_relay_delivery_lag_and_dead_letters(measured: Measured) -> None:
    store = MemoryDurability()
    await commit_events(store, "t1", "turn-1", 3)
    await commit_events(store, "t2", "turn-1", 2)
    sink: EventSink = Accepting()
    relay = OutboxRelay(store, sink, relay_id="r1", backoff=FAST, meter_provider=measured.provider)
    await relay.run_once()
    [(attrs, lag)] = measured.points("ik.relay.delivery.lag")
    assert attrs == {"ik.relay.id": "r1"}
    assert lag.count == 5 and lag.min >= 0
    assert measured.points("ik.relay.dead_letters") == []

    await commit_events(store, "t3", "turn-1", 1)
    refusing = OutboxRelay(
        store, Refusing(), relay_id="r2", backoff=FAST, meter_provider=measured.provider
    )
    await refusing.run_once()
    [(attrs, dead)] = measured.points("ik.relay.dead_letters")
    assert attrs == {"ik.relay.id": "r2", "ik.relay.outcome": "reject"}
    assert dead.value == 1
