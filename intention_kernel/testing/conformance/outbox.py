"""The ``OutboxSource`` conformance suite: what every store must do for the outbox relay.

A store runs it by subclassing ``OutboxSourceConformance`` and providing an ``outbox_harness``
fixture::

    import pytest
    from intention_kernel.testing.conformance.outbox import OutboxHarness, OutboxSourceConformance

    class MyOutboxHarness(OutboxHarness):
        def __init__(self, directory):
            super().__init__()
            self.path = directory / "outbox.db"

        async def _open(self):
            return MyDurability(self.path)  # a DurabilityStore that is also an OutboxSource

    class TestMyOutbox(OutboxSourceConformance):
        @pytest.fixture
        def outbox_harness(self, tmp_path):
            return MyOutboxHarness(tmp_path)

Claim expiry and retry times are checked with real sleeps of ``OutboxHarness.claim_ttl``
seconds, because SQL stores use the database clock. The suite needs pytest; it runs each test
in a fresh event loop, so no asyncio pytest plugin is needed.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from ...contracts.durability import TurnScope
from ...contracts.events import StoredEvent
from ._outbox_partitions import OutboxPartitionConformance
from ._outbox_support import OutboxHarness, OutboxStore, commit_events, outbox_test
from ._support import make_events

__all__ = [
    "OutboxHarness",
    "OutboxSourceConformance",
    "OutboxStore",
    "commit_events",
    "outbox_test",
]


def _keys(events: list[StoredEvent]) -> list[tuple[str, str, int]]:
    return [(e.event.thread_id, e.event.turn_id, e.event.sequence) for e in events]


def _of(events: list[StoredEvent], thread_id: str) -> list[StoredEvent]:
    return [e for e in events if e.event.thread_id == thread_id]


class OutboxSourceConformance(OutboxPartitionConformance):
    """Every outbox-source test. Subclass it (with a ``Test`` prefix), define ``outbox_harness``."""

    @outbox_test
    async def test_outbox_claim_is_in_commit_order_per_thread(self, h: OutboxHarness) -> None:
        store = await h.open()
        await commit_events(store, "t1", "turn-1", 3)
        await commit_events(store, "t2", "turn-1", 2)
        await commit_events(store, "t1", "turn-2", 2)
        batch = await store.claim("relay-a", limit=100, lease=30)
        positions = [e.position for e in batch]
        assert positions == sorted(positions)
        assert _keys(_of(batch, "t1")) == [
            ("t1", "turn-1", 0),
            ("t1", "turn-1", 1),
            ("t1", "turn-1", 2),
            ("t1", "turn-2", 0),
            ("t1", "turn-2", 1),
        ]
        assert _keys(_of(batch, "t2")) == [("t2", "turn-1", 0), ("t2", "turn-1", 1)]
        assert all(e.attempts == 0 and e.delivered_at is None and not e.dead for e in batch)

    @outbox_test
    async def test_outbox_uncommitted_turn_events_are_never_claimable(
        self, h: OutboxHarness
    ) -> None:
        store = await h.open()

        async def failing(scope: TurnScope) -> None:
            make_events(scope, 2)
            raise RuntimeError("operation failed before commit")

        with pytest.raises(RuntimeError):
            await store.with_turn("t1", "turn-1", failing)
        await commit_events(store, "t2", "turn-1", 1)
        batch = await store.claim("relay-a", limit=100, lease=30)
        assert _keys(batch) == [("t2", "turn-1", 0)]

    @outbox_test
    async def test_outbox_claims_are_exclusive_between_relays(self, h: OutboxHarness) -> None:
        store = await h.open()
        await commit_events(store, "t1", "turn-1", 3)
        await commit_events(store, "t2", "turn-1", 3)
        await commit_events(store, "t1", "turn-2", 3)
        first = await store.claim("relay-a", limit=2, lease=30)
        assert _keys(first) == [("t1", "turn-1", 0), ("t1", "turn-1", 1)]
        # t1's head is claimed by relay-a: relay-b may only take other threads.
        second = await store.claim("relay-b", limit=100, lease=30)
        assert {e.event.thread_id for e in second} == {"t2"}
        assert len(second) == 3
        assert await store.claim("relay-c", limit=100, lease=30) == []
        assert await store.claim("relay-a", limit=100, lease=30) == []

    @outbox_test
    async def test_outbox_expired_claim_is_reclaimed_with_the_same_event_id(
        self, h: OutboxHarness
    ) -> None:
        store = await h.open()
        await commit_events(store, "t1", "turn-1", 2)
        first = await store.claim("relay-a", limit=100, lease=h.claim_ttl)
        assert await store.claim("relay-b", limit=100, lease=30) == []
        await asyncio.sleep(h.claim_ttl * 1.5)
        second = await store.claim("relay-b", limit=100, lease=30)
        assert [e.event.id for e in second] == [e.event.id for e in first]
        assert [e.position for e in second] == [e.position for e in first]
        assert [e.attempts for e in second] == [0, 0]
        # The old holder is fenced for failures and releases, but an acknowledgement is a fact.
        stale = await store.record_failure(
            "relay-a", first[0].position, error="late", retry_in=60, max_attempts=5
        )
        assert stale is None
        assert await store.release("relay-a", [first[1].position]) == 0
        assert await store.mark_delivered("relay-a", [first[0].position]) == 1
        assert await store.mark_delivered("relay-b", [first[0].position]) == 0

    @outbox_test
    async def test_outbox_release_gives_back_the_claim_without_an_attempt(
        self, h: OutboxHarness
    ) -> None:
        store = await h.open()
        await commit_events(store, "t1", "turn-1", 2)
        batch = await store.claim("relay-a", limit=100, lease=30)
        assert await store.release("relay-a", [e.position for e in batch]) == 2
        again = await store.claim("relay-b", limit=100, lease=30)
        assert [e.event.id for e in again] == [e.event.id for e in batch]
        assert all(e.attempts == 0 for e in again)

    @outbox_test
    async def test_outbox_mark_delivered_is_idempotent_and_visible(self, h: OutboxHarness) -> None:
        store = await h.open()
        await commit_events(store, "t1", "turn-1", 2)
        batch = await store.claim("relay-a", limit=100, lease=30)
        assert await store.mark_delivered("relay-a", [batch[0].position]) == 1
        assert await store.mark_delivered("relay-a", [batch[0].position]) == 0
        outbox = await store.read_outbox(thread_id="t1")
        assert outbox[0].delivered_at is not None and outbox[1].delivered_at is None
        assert await store.claim("relay-b", limit=100, lease=30) == []  # t1's head is claimed
        await store.release("relay-a", [batch[1].position])
        rest = await store.claim("relay-b", limit=100, lease=30)
        assert [e.position for e in rest] == [batch[1].position]

    @outbox_test
    async def test_outbox_failure_holds_back_only_its_own_thread(self, h: OutboxHarness) -> None:
        store = await h.open()
        await commit_events(store, "t1", "turn-1", 2)
        await commit_events(store, "t2", "turn-1", 2)
        batch = await store.claim("relay-a", limit=100, lease=30)
        t1, t2 = _of(batch, "t1"), _of(batch, "t2")
        failed = await store.record_failure(
            "relay-a", t1[0].position, error="broker down", retry_in=h.claim_ttl, max_attempts=5
        )
        assert failed is not None
        assert (failed.attempts, failed.last_error, failed.dead) == (1, "broker down", False)
        await store.release("relay-a", [t1[1].position])
        await store.mark_delivered("relay-a", [e.position for e in t2])
        await commit_events(store, "t2", "turn-2", 1)
        await commit_events(store, "t1", "turn-2", 1)
        flowing = await store.claim("relay-a", limit=100, lease=30)
        assert _keys(flowing) == [("t2", "turn-2", 0)]  # t1 waits for its retry time
        await asyncio.sleep(h.claim_ttl * 1.5)
        retried = await store.claim("relay-b", limit=100, lease=30)
        assert _keys(retried) == [
            ("t1", "turn-1", 0),
            ("t1", "turn-1", 1),
            ("t1", "turn-2", 0),
        ]
        assert (retried[0].attempts, retried[0].last_error) == (1, "broker down")

    @outbox_test
    async def test_outbox_dead_letter_after_max_attempts_holds_back_its_thread(
        self, h: OutboxHarness
    ) -> None:
        store = await h.open()
        await commit_events(store, "t1", "turn-1", 2)
        poison = (await store.read_outbox(thread_id="t1"))[0]
        for attempt in range(1, 4):
            batch = await store.claim("relay-a", limit=1, lease=30)
            assert [e.event.id for e in batch] == [poison.event.id]
            assert batch[0].attempts == attempt - 1
            result = await store.record_failure(
                "relay-a", poison.position, error=f"boom {attempt}", retry_in=0, max_attempts=3
            )
            assert result is not None and result.dead is (attempt == 3)
        dead = await store.dead_letters()
        assert [(e.event.id, e.attempts, e.last_error, e.dead) for e in dead] == [
            (poison.event.id, 3, "boom 3", True)
        ]
        assert await store.claim("relay-a", limit=100, lease=30) == []  # in order: t1 waits
        stats = await store.outbox_stats()
        assert (stats.dead, stats.pending, stats.claimed, stats.blocked_threads) == (1, 1, 0, 1)

    @outbox_test
    async def test_outbox_dead_event_blocks_only_its_thread_and_requeue_resumes_in_order(
        self, h: OutboxHarness
    ) -> None:
        store = await h.open()
        await commit_events(store, "t1", "turn-1", 2)
        await commit_events(store, "t2", "turn-1", 1)
        batch = await store.claim("relay-a", limit=100, lease=30)
        t1, t2 = _of(batch, "t1"), _of(batch, "t2")
        dead = await store.record_failure(
            "relay-a", t1[0].position, error="poison", retry_in=0, max_attempts=1
        )
        assert dead is not None and dead.dead
        assert await store.release("relay-a", [t1[1].position]) == 1
        await store.mark_delivered("relay-a", [e.position for e in t2])
        await commit_events(store, "t1", "turn-2", 1)
        await commit_events(store, "t2", "turn-2", 2)
        # Other threads keep flowing; no later event of t1 overtakes the dead one.
        flowing = await store.claim("relay-b", limit=100, lease=30)
        assert _keys(flowing) == [("t2", "turn-2", 0), ("t2", "turn-2", 1)]
        await store.mark_delivered("relay-b", [e.position for e in flowing])
        assert await store.claim("relay-b", limit=100, lease=30) == []
        stats = await store.outbox_stats()
        assert (stats.dead, stats.pending, stats.blocked_threads) == (1, 2, 1)
        assert [e.position for e in await store.dead_letters()] == [t1[0].position]
        # Re-queued, the dead event is the thread's head again and the thread resumes in order.
        assert await store.requeue(thread_id="t1") == 1
        resumed = await store.claim("relay-c", limit=100, lease=30)
        assert _keys(resumed) == [("t1", "turn-1", 0), ("t1", "turn-1", 1), ("t1", "turn-2", 0)]
        assert (resumed[0].attempts, resumed[0].last_error, resumed[0].dead) == (0, "poison", False)
        assert (await store.outbox_stats()).blocked_threads == 0

    @outbox_test
    async def test_outbox_permanent_rejection_dead_letters_at_once(self, h: OutboxHarness) -> None:
        store = await h.open()
        await commit_events(store, "t1", "turn-1", 1)
        batch = await store.claim("relay-a", limit=100, lease=30)
        result = await store.record_failure(
            "relay-a",
            batch[0].position,
            error="[SINK_REJECTED] HTTP 400",
            retry_in=60,
            max_attempts=10,
            permanent=True,
        )
        assert result is not None
        assert (result.dead, result.attempts, result.last_error) == (
            True,
            1,
            "[SINK_REJECTED] HTTP 400",
        )
        assert await store.claim("relay-a", limit=100, lease=30) == []

    @outbox_test
    async def test_outbox_requeue_makes_dead_events_deliverable(self, h: OutboxHarness) -> None:
        store = await h.open()
        await commit_events(store, "t1", "turn-1", 1)
        await commit_events(store, "t2", "turn-1", 1)
        for event in await store.claim("relay-a", limit=100, lease=30):
            await store.record_failure(
                "relay-a", event.position, error="no", retry_in=0, max_attempts=1
            )
        assert len(await store.dead_letters()) == 2
        assert await store.requeue(thread_id="t2") == 1
        batch = await store.claim("relay-a", limit=100, lease=30)
        assert _keys(batch) == [("t2", "turn-1", 0)]
        assert (batch[0].attempts, batch[0].last_error, batch[0].dead) == (0, "no", False)
        dead = await store.dead_letters()
        assert await store.requeue([dead[0].position]) == 1
        assert await store.requeue() == 0
        assert _keys(await store.claim("relay-b", limit=100, lease=30)) == [("t1", "turn-1", 0)]

    @outbox_test
    async def test_outbox_prune_deletes_only_old_delivered_events(self, h: OutboxHarness) -> None:
        store = await h.open()
        for thread_id in ("t1", "t2", "t3"):
            await commit_events(store, thread_id, "turn-1", 1)
        batch = await store.claim("relay-a", limit=100, lease=30)
        by_thread = {e.event.thread_id: e for e in batch}
        await store.mark_delivered("relay-a", [by_thread["t1"].position])
        await store.record_failure(
            "relay-a", by_thread["t2"].position, error="no", retry_in=0, max_attempts=1
        )
        await store.release("relay-a", [by_thread["t3"].position])
        assert await store.prune(3600) == 0
        await asyncio.sleep(0.05)
        assert await store.prune(0.01) == 1
        left = await store.read_outbox()
        assert [e.event.thread_id for e in left] == ["t2", "t3"]
        assert left[0].dead and left[1].delivered_at is None
        stats = await store.outbox_stats()
        assert (stats.delivered, stats.dead, stats.pending) == (0, 1, 1)
        assert stats.oldest_pending_age is not None and stats.oldest_pending_age >= 0

    @outbox_test
    async def test_outbox_stats_count_the_backlog(self, h: OutboxHarness) -> None:
        store = await h.open()
        empty = await store.outbox_stats()
        assert (empty.pending, empty.dead, empty.delivered, empty.oldest_pending_age) == (
            0,
            0,
            0,
            None,
        )
        await commit_events(store, "t1", "turn-1", 3)
        batch = await store.claim("relay-a", limit=1, lease=30)
        await store.mark_delivered("relay-a", [batch[0].position])
        stats = await store.outbox_stats()
        assert (stats.pending, stats.claimed, stats.delivered) == (2, 0, 1)

    @outbox_test
    async def test_outbox_state_survives_a_restart(self, h: OutboxHarness) -> None:
        store = await h.open()
        await commit_events(store, "t1", "turn-1", 2)
        batch = await store.claim("relay-a", limit=100, lease=30)
        await store.mark_delivered("relay-a", [batch[0].position])
        reopened = await h.open()
        outbox = await reopened.read_outbox()
        assert outbox[0].delivered_at is not None
        assert await reopened.claim("relay-b", limit=100, lease=30) == []  # still claimed
        assert await reopened.release("relay-a", [batch[1].position]) == 1
        assert _keys(await reopened.claim("relay-b", limit=100, lease=30)) == [("t1", "turn-1", 1)]

    @outbox_test
    async def test_outbox_random_programs_keep_the_claim_rule(self, h: OutboxHarness) -> None:
        """Seeded random commits, claims by three relays, acks, failures and releases; after
        every claim: no event is claimed twice, each thread's part is a prefix of its
        undelivered events (a dead event blocks its thread), nothing backing off is returned,
        and something is returned when possible."""
        for seed in range(h.random_programs):
            await _random_program(await h.open(), random.Random(seed), seed)


async def _random_program(store: OutboxStore, rng: random.Random, seed: int) -> None:
    thread_of: dict[int, str] = {}
    done: set[int] = set()  # delivered
    dead: set[int] = set()  # dead-lettered: holds back its thread
    waiting: set[int] = set()  # failed with a long retry time
    held: dict[int, str] = {}  # live claims (long leases: none expire during the program)
    turns = 0
    relays = ("relay-a", "relay-b", "relay-c")
    for step in range(120):
        action = rng.random()
        if action < 0.25:
            thread_id = f"s{seed}-t{rng.randrange(4)}"
            turns += 1
            await commit_events(store, thread_id, f"turn-{turns:04d}", rng.randint(1, 3))
            for stored in await store.read_outbox(thread_id=thread_id):
                thread_of.setdefault(stored.position, thread_id)
            continue
        if action < 0.6 or not held:
            relay = rng.choice(relays)
            batch = await store.claim(relay, limit=rng.randint(1, 6), lease=600)
            _check_claim(batch, thread_of, done, dead, waiting, held, step)
            held.update((e.position, relay) for e in batch)
            continue
        position = rng.choice(sorted(held))
        relay = held.pop(position)
        later = sorted(p for p in held if thread_of[p] == thread_of[position] and p > position)
        choice = rng.random()
        if choice < 0.5:
            assert await store.mark_delivered(relay, [position]) == 1
            done.add(position)
        elif choice < 0.8:
            permanent = rng.random() < 0.3
            retry_in = 0.0 if rng.random() < 0.5 else 3600.0
            failed = await store.record_failure(
                relay, position, error="x", retry_in=retry_in, max_attempts=3, permanent=permanent
            )
            assert failed is not None
            if failed.dead:
                dead.add(position)
            elif retry_in:
                waiting.add(position)
            # Later events of the thread must not go before this one: give them back.
            assert await store.release(relay, later) == len(later)
            for p in later:
                held.pop(p)
        else:
            assert await store.release(relay, [position, *later]) == 1 + len(later)
            for p in later:
                held.pop(p)


def _check_claim(
    batch: list[StoredEvent],
    thread_of: dict[int, str],
    done: set[int],
    dead: set[int],
    waiting: set[int],
    held: dict[int, str],
    step: int,
) -> None:
    positions = [e.position for e in batch]
    assert positions == sorted(positions), step
    chosen = set(positions)
    for stored in batch:
        position = stored.position
        assert position not in held, f"step {step}: {position} claimed twice"
        assert position not in done and position not in dead and position not in waiting, step
        thread_id = thread_of[position]
        for earlier, owner in thread_of.items():
            if owner == thread_id and earlier < position and earlier not in done:
                assert earlier in chosen, f"step {step}: {position} claimed before {earlier}"
    blocked: set[str] = set()
    claimable = False
    for position in sorted(thread_of):
        thread_id = thread_of[position]
        if position in done or thread_id in blocked:
            continue
        if position in held or position in waiting or position in dead:
            blocked.add(thread_id)
            continue
        claimable = True
        break
    assert claimable == bool(batch), f"step {step}: claim returned {positions}"
