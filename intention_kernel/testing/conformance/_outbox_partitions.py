"""Relay partitions: what every outbox source must do for relays that share the threads.

Checked through the public face only (``hold_partition``, ``release_partition`` and
``claim(partitions=)``): which thread a store places in which partition is its own choice, so the
tests ask that every thread lands in exactly one served share, whole and in order.
"""

from __future__ import annotations

import asyncio

import pytest

from ...contracts.errors import InvalidInputError
from ...contracts.events import StoredEvent
from ...contracts.outbox import Partition, Partitions
from ._outbox_support import OutboxHarness, OutboxStore, commit_events, outbox_test

__all__ = ["OutboxPartitionConformance"]

THREADS = 24


async def _fill(store: OutboxStore, threads: int = THREADS) -> None:
    for turn in (1, 2):
        for n in range(threads):
            await commit_events(store, f"t{n:02d}", f"turn-{turn}", 2)


async def _drain(store: OutboxStore, relay: str, served: Partitions) -> list[StoredEvent]:
    """Everything ``relay`` can claim from its share, delivered as it goes."""
    taken: list[StoredEvent] = []
    while batch := await store.claim(relay, limit=7, lease=30, partitions=served):
        taken += batch
        await store.mark_delivered(relay, [e.position for e in batch])
    return taken


class OutboxPartitionConformance:
    """The partition tests of ``OutboxSourceConformance``."""

    @outbox_test
    async def test_outbox_partitions_split_threads_whole_and_in_order(
        self, h: OutboxHarness
    ) -> None:
        store = await h.open()
        await _fill(store)
        first = await store.hold_partition("relay-0", Partition(0, 3), lease=30)
        assert first.served == {0, 1, 2}  # alone so far: it serves every share
        shares = [
            await store.hold_partition(f"relay-{i}", Partition(i, 3), lease=30) for i in (1, 2, 0)
        ]
        shares = [shares[2], shares[0], shares[1]]
        assert [s.served for s in shares] == [{0}, {1}, {2}]
        owner: dict[str, int] = {}
        for index, served in enumerate(shares):
            for stored in await _drain(store, f"relay-{index}", served):
                thread_id = stored.event.thread_id
                assert owner.setdefault(thread_id, index) == index, f"{thread_id} in two shares"
        assert len(owner) == THREADS  # every thread in exactly one share, drained by it
        assert (await store.outbox_stats()).pending == 0
        # The same thread lands in the same share every time (a new event follows its thread).
        await commit_events(store, "t00", "turn-3", 1)
        again = await store.claim(
            f"relay-{owner['t00']}", limit=10, lease=30, partitions=shares[owner["t00"]]
        )
        assert [e.event.turn_id for e in again] == ["turn-3"]

    @outbox_test
    async def test_outbox_partition_lease_keeps_a_second_relay_out(self, h: OutboxHarness) -> None:
        store = await h.open()
        await _fill(store, 4)
        first = await store.hold_partition("relay-a", Partition(0, 1), lease=h.claim_ttl)
        assert first.served == {0}
        second = await store.hold_partition("relay-b", Partition(0, 1), lease=30)
        assert second == Partitions(1, frozenset())
        assert await store.claim("relay-b", limit=100, lease=30, partitions=second) == []
        # A renewal by the holder keeps it; once its lease runs out, the other takes it.
        assert (await store.hold_partition("relay-a", Partition(0, 1), lease=h.claim_ttl)).served
        await asyncio.sleep(h.claim_ttl * 1.5)
        taken = await store.hold_partition("relay-b", Partition(0, 1), lease=30)
        assert taken.served == {0}
        assert len(await store.claim("relay-b", limit=100, lease=30, partitions=taken)) == 16
        assert (await store.hold_partition("relay-a", Partition(0, 1), lease=30)).served == set()

    @outbox_test
    async def test_outbox_a_stopped_relays_share_goes_to_the_next_live_one(
        self, h: OutboxHarness
    ) -> None:
        store = await h.open()
        await _fill(store)
        for i in range(3):
            await store.hold_partition(f"relay-{i}", Partition(i, 3), lease=30)
        assert await store.release_partition("relay-0", Partition(0, 3))
        assert not await store.release_partition("relay-0", Partition(0, 3))  # not held now
        assert not await store.release_partition("relay-2", Partition(1, 3))  # not its own
        # Partition 0 has no holder: the next live one counting up (1) serves it too.
        one = await store.hold_partition("relay-1", Partition(1, 3), lease=30)
        two = await store.hold_partition("relay-2", Partition(2, 3), lease=30)
        assert (one.served, two.served) == (frozenset({0, 1}), frozenset({2}))
        drained = await _drain(store, "relay-1", one) + await _drain(store, "relay-2", two)
        assert len(drained) == THREADS * 4
        # Relay 0 back: its share is its own again at the others' next renewal.
        assert (await store.hold_partition("relay-0", Partition(0, 3), lease=30)).served == {0}
        assert (await store.hold_partition("relay-1", Partition(1, 3), lease=30)).served == {1}

    @outbox_test
    async def test_outbox_an_expired_partition_lease_is_served_by_the_next_relay(
        self, h: OutboxHarness
    ) -> None:
        store = await h.open()
        await store.hold_partition("relay-0", Partition(0, 4), lease=h.claim_ttl)  # then dies
        await store.hold_partition("relay-1", Partition(1, 4), lease=h.claim_ttl)  # then dies
        await store.hold_partition("relay-3", Partition(3, 4), lease=30)
        await asyncio.sleep(h.claim_ttl * 1.5)
        # Counting up from 0, 1 and 2 (never held), the next live partition is 3: all its own.
        assert (await store.hold_partition("relay-3", Partition(3, 4), lease=30)).served == {
            0,
            1,
            2,
            3,
        }
        back = await store.hold_partition("relay-1b", Partition(1, 4), lease=30)
        assert back.served == {0, 1}
        assert (await store.hold_partition("relay-3", Partition(3, 4), lease=30)).served == {
            2,
            3,
        }

    @outbox_test
    async def test_outbox_partition_arguments_are_checked(self, h: OutboxHarness) -> None:
        store = await h.open()
        await _fill(store, 2)
        with pytest.raises(InvalidInputError):
            await store.hold_partition("relay-a", "0/3", lease=30)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            await store.hold_partition("", Partition(0, 3), lease=30)
        with pytest.raises(InvalidInputError):
            await store.hold_partition("relay-a", Partition(0, 3), lease=-1)
        with pytest.raises(InvalidInputError):
            await store.claim("relay-a", limit=9, lease=30, partitions={0})  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            await store.release_partition("relay-a", (0, 3))  # type: ignore[arg-type]
        # Nothing was taken or claimed by the refused calls.
        assert (await store.hold_partition("relay-b", Partition(0, 3), lease=30)).served == {
            0,
            1,
            2,
        }
        assert len(await store.claim("relay-c", limit=100, lease=30)) == 8

    @outbox_test
    async def test_outbox_stats_list_the_partition_leases(self, h: OutboxHarness) -> None:
        store = await h.open()
        assert (await store.outbox_stats()).partitions == ()
        await store.hold_partition("relay-a", Partition(0, 2), lease=30)
        await store.hold_partition("relay-b", Partition(1, 2), lease=h.claim_ttl)
        await asyncio.sleep(h.claim_ttl * 1.5)
        leases = (await store.outbox_stats()).partitions
        assert [(p.count, p.index, p.holder, p.live) for p in leases] == [
            (2, 0, "relay-a", True),
            (2, 1, "relay-b", False),  # expired, listed until a relay takes it again
        ]
        assert leases[0].held_until > leases[1].held_until
        await store.release_partition("relay-a", Partition(0, 2))
        left = (await store.outbox_stats()).partitions
        assert [(p.index, p.holder) for p in left] == [(1, "relay-b")]
