"""Pieces of the inbox conformance suite (``inbox.py``): the harness, builders, the refusal
tables, the concurrent claim program, and the tests of what the inbox reports (``InboxReads``)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest

from ...contracts.durability import DurabilityStore, TurnScope
from ...contracts.errors import ErrorCode, InvalidIdError, InvalidInputError, UsageError
from ...contracts.inbox import InboxRequest, RequestState
from ...durability._inbox import Inbox
from ._harness import StoreHarness, harness_test
from ._support import make_result

__all__ = [
    "LATER",
    "UNREADABLE_PAYLOAD",
    "InboxHarness",
    "InboxReads",
    "InboxStore",
    "claim_program",
    "commit_turn",
    "inbox_test",
    "refused",
    "submit",
]

PENDING, RUNNING, DONE, DEAD = (
    RequestState.PENDING,
    RequestState.RUNNING,
    RequestState.DONE,
    RequestState.DEAD,
)
LATER = timedelta(hours=1)
"""Far enough that no test outlives it: a ``not_before`` or retry that is not due."""
STALL = 10.0
"""Seconds a concurrent program may find nothing to claim, nothing held, and work left."""
UNREADABLE_PAYLOAD = '["not", "a", "turn request"]'
"""JSON text (so a JSON column takes it too) that no store can read back as a request."""
_ID_CODES = {ErrorCode.INVALID_ID, ErrorCode.INVALID_THREAD_ID, ErrorCode.INVALID_TURN_ID}


class InboxStore(DurabilityStore, Protocol):
    """A durable store with a turn inbox (``store.inbox``)."""

    @property
    def inbox(self) -> Inbox: ...


class InboxHarness(StoreHarness[InboxStore]):
    """Opens stores over one test's storage; calling ``open()`` again models a restart."""

    claim_ttl: float = 0.4
    """A short claim lease and retry time (seconds) the expiry tests wait out; also the margin
    the progress pruning test keeps on each side of its cutoff (the store's clock against
    this process's)."""

    durable: bool = True
    """The state outlives ``close()``: the restart test closes the first store before it opens
    the next. A harness whose opens share process memory (the memory store) sets ``False``:
    the next store is opened beside the first."""

    claim_programs: int = 3
    """How many seeded concurrent claim programs the concurrency test runs."""

    async def corrupt_request(
        self, thread_id: str, turn_id: str, payload: str = UNREADABLE_PAYLOAD
    ) -> None:
        """Write ``payload`` as the stored payload of the request, as a disk fault or another
        writer could (optional: without it the corrupt-row test is skipped)."""
        pytest.skip(f"{type(self).__name__} cannot write raw request rows")


inbox_test = harness_test("inbox_harness")
"""Run an ``async`` test body in a fresh event loop and close what it opened."""


async def submit(store: InboxStore, thread_id: str, turn_id: str, **options: Any) -> InboxRequest:
    """Submit a request with a text and fingerprint made from its ids (``options`` override)."""
    options.setdefault("text", f"question {turn_id}")
    options.setdefault("fingerprint", f"fp-{thread_id}-{turn_id}")
    return await store.inbox.submit(thread_id, turn_id, **options)


async def commit_turn(
    store: DurabilityStore, thread_id: str, turn_id: str, *, fingerprint: str | None = None
) -> None:
    """Run the turn through ``with_turn`` and commit it (a replay of a committed turn)."""

    async def operation(scope: TurnScope) -> None:
        if scope.prior_result is None:
            await scope.commit(make_result(scope))

    await store.with_turn(thread_id, turn_id, operation, request_fingerprint=fingerprint)


def refused(error: BaseException, kind: type[InvalidInputError | UsageError], code: str) -> None:
    """The error is a ``kind`` with ``code``."""
    assert isinstance(error, kind), repr(error)
    assert isinstance(error, InvalidInputError | UsageError)
    assert str(error.code) == str(code), (error.code, code)


Call = tuple[str, tuple[Any, ...], dict[str, Any], ErrorCode]
"""A malformed call of an ``Inbox`` method: its name, arguments and the code it is refused with
(an ``InvalidIdError`` for an id's code, an ``InvalidInputError`` for any other)."""


def bad_calls(max_bytes: int) -> list[Call]:
    """Malformed calls of every kind: ids, times, sizes, JSON, cursors, ttl, notes."""
    naive = datetime.now(UTC).replace(tzinfo=None)
    ok: dict[str, Any] = {"text": "hello", "fingerprint": "fp-1"}
    key = ("t1", "turn-1")
    code = ErrorCode
    return [
        ("submit", ("", "turn-1"), ok, code.INVALID_THREAD_ID),
        ("submit", ("t\x00", "turn-1"), ok, code.INVALID_THREAD_ID),
        ("submit", ("t1", " "), ok, code.INVALID_TURN_ID),
        ("submit", ("t1", 7), ok, code.INVALID_TURN_ID),
        ("submit", key, {**ok, "fingerprint": ""}, code.INVALID_INPUT),
        ("submit", key, {**ok, "not_before": naive}, code.INVALID_INPUT),
        ("submit", key, {**ok, "text": 5}, code.INVALID_INPUT),
        ("submit", key, {**ok, "text": "x" * (max_bytes + 1)}, code.INVALID_INPUT),
        ("submit", key, {**ok, "host_context": {"tags": {1, 2}}}, code.NOT_SERIALIZABLE),
        ("submit", key, {**ok, "host_context": {"r": float("nan")}}, code.NON_FINITE_NUMBER),
        ("submit", key, {**ok, "selection": ["a"]}, code.INVALID_INPUT),
        ("claim", ("",), {"ttl": 1}, code.INVALID_ID),
        ("claim", ("w1",), {"ttl": 0}, code.INVALID_INPUT),
        ("renew", ("w1",), {"ttl": -1}, code.INVALID_INPUT),
        ("release", ("w1", *key), {"retry_in": -1}, code.INVALID_INPUT),
        ("release", ("w1", "", "turn-1"), {"retry_in": None}, code.INVALID_THREAD_ID),
        ("list_requests", (), {"state": "gone"}, code.INVALID_INPUT),
        ("list_requests", (), {"limit": 0}, code.INVALID_INPUT),
        ("list_requests", (), {"after_position": -1}, code.INVALID_INPUT),
        ("read_progress", key, {"after": -1}, code.INVALID_INPUT),
        ("append_progress", (*key, []), {}, code.INVALID_INPUT),
        ("prune_progress", (), {"older_than": naive}, code.INVALID_INPUT),
        ("retry", key, {"actor": "ops", "note": " "}, code.INVALID_INPUT),
        ("cancel", key, {"actor": "", "note": "stop"}, code.INVALID_ID),
    ]


async def claim_program(
    stores: Sequence[InboxStore],
    rng: random.Random,
    prefix: str,
    *,
    workers: int,
    threads: int,
    per_thread: int,
) -> None:
    """``workers`` concurrent claimers over ``threads`` threads of ``per_thread`` requests.

    Each claimer (its own worker id, the stores taken in turn) claims, works a random moment,
    then commits the turn, releases it for a retry (now or a moment later), or gives it up
    (dead). Checked on every claim: the attempts count, and that no other claimer holds the
    thread (a claimer stops holding before it starts to give back). At the end: each thread's
    claims, repeats folded, are its submissions in order, and every request is done or dead as
    it was left."""
    submitted: dict[str, list[str]] = {}
    order = [t for t in range(threads) for _ in range(per_thread)]
    rng.shuffle(order)
    for t in order:
        thread_id = f"{prefix}-t{t}"
        turn_id = f"turn-{len(submitted.get(thread_id, [])):03d}"
        await submit(stores[0], thread_id, turn_id)
        submitted.setdefault(thread_id, []).append(turn_id)
    holders: dict[str, str] = {}
    claimed: dict[str, list[str]] = {thread_id: [] for thread_id in submitted}
    attempts: Counter[tuple[str, str]] = Counter()
    outcome: dict[tuple[str, str], RequestState] = {}
    total = threads * per_thread
    loop = asyncio.get_running_loop()
    progressed = [loop.time()]

    async def worker(index: int) -> None:
        store = stores[index % len(stores)]
        worker_id = f"{prefix}-w{index}"
        own = random.Random(rng.random())
        while len(outcome) < total:
            request = await store.inbox.claim(worker_id, ttl=120)
            if request is None:
                stuck = loop.time() - progressed[0]
                assert holders or stuck < STALL, f"nothing claimable for {stuck:.0f}s: {outcome}"
                await asyncio.sleep(own.uniform(0, 0.004))
                continue
            progressed[0] = loop.time()
            key = request.key
            assert key[0] not in holders, f"{worker_id} got {key}; {holders.get(key[0])} holds it"
            assert request.state is RUNNING and request.claimed_by == worker_id
            holders[key[0]] = worker_id
            claimed[key[0]].append(key[1])
            attempts[key] += 1
            assert request.attempts == attempts[key], (key, request.attempts, attempts[key])
            await asyncio.sleep(own.uniform(0, 0.003))
            choice = own.random()
            del holders[key[0]]
            if choice < 0.6:
                await commit_turn(store, *key, fingerprint=request.fingerprint)
                outcome[key] = DONE
            elif choice < 0.85:
                wait = own.choice((0.0, 0.02))  # a wait holds back the rest of the thread
                again = await store.inbox.release(worker_id, *key, retry_in=wait, error="again")
                assert again is not None and again.state is PENDING, again
            else:
                dead = await store.inbox.release(worker_id, *key, retry_in=None, error="no")
                assert dead is not None and dead.state is DEAD, dead
                outcome[key] = DEAD

    async with asyncio.timeout(300), asyncio.TaskGroup() as group:
        for index in range(workers):
            group.create_task(worker(index))
    for thread_id, turn_ids in submitted.items():
        folded = [
            t for i, t in enumerate(claimed[thread_id]) if i == 0 or claimed[thread_id][i - 1] != t
        ]
        assert folded == turn_ids, (thread_id, claimed[thread_id])
    for key, state in outcome.items():
        stored = await stores[-1].inbox.get(*key)
        assert stored is not None
        assert (stored.state, stored.attempts) == (state, attempts[key]), stored


class InboxReads:
    """What the inbox reports: refusals, the backlog, the listing and the progress log."""

    @inbox_test
    async def test_bad_input_is_refused_by_type_and_writes_nothing(self, h: InboxHarness) -> None:
        store = await h.open()
        request = None
        for name, args, kwargs, code in bad_calls(store.inbox.json_limits.max_bytes):
            if name != "submit" and request is None:
                assert await store.inbox.list_requests() == []  # no bad submit wrote
                request = await submit(store, "t1", "turn-1")
            with pytest.raises(InvalidInputError) as error:
                await getattr(store.inbox, name)(*args, **kwargs)
            refused(error.value, InvalidIdError if code in _ID_CODES else InvalidInputError, code)
        assert await store.inbox.list_requests() == [request]
        assert await store.inbox.read_progress("t1", "turn-1") == []
        stats = await store.inbox.stats()
        assert (stats.pending, stats.running, stats.dead) == (1, 0, 0)

    @inbox_test
    async def test_stats_count_the_backlog(self, h: InboxHarness) -> None:
        store = await h.open()
        empty = await store.inbox.stats()
        assert (empty.pending, empty.running, empty.dead, empty.oldest_pending_at) == (
            0,
            0,
            0,
            None,
        )
        running = await submit(store, "t1", "turn-a")
        oldest = await submit(store, "t1", "turn-b")
        dead = await submit(store, "t2", "turn-a")
        await submit(store, "t3", "turn-a")
        assert await store.inbox.claim("w1", ttl=30) is not None
        assert await store.inbox.claim("w1", ttl=30) is not None
        await store.inbox.release("w1", *dead.key, retry_in=None)
        stats = await store.inbox.stats()
        assert (stats.pending, stats.running, stats.dead) == (2, 1, 1)
        assert stats.oldest_pending_at == oldest.submitted_at
        await commit_turn(store, *running.key)
        stats = await store.inbox.stats()
        assert (stats.pending, stats.running, stats.dead) == (2, 0, 1)

    @inbox_test
    async def test_list_requests_filters_and_pages_by_position(self, h: InboxHarness) -> None:
        store = await h.open()
        submitted = [await submit(store, f"t{i % 2}", f"turn-{i}") for i in range(5)]
        positions = [r.position for r in submitted]
        assert positions == sorted(set(positions))
        assert await store.inbox.list_requests() == submitted
        assert await store.inbox.list_requests(thread_id="t1") == submitted[1::2]
        assert await store.inbox.list_requests(after_position=positions[2]) == submitted[3:]
        pages, cursor = [], 0
        while page := await store.inbox.list_requests(after_position=cursor, limit=2):
            pages.append(page)
            cursor = page[-1].position
        assert [len(page) for page in pages] == [2, 2, 1]
        assert [r for page in pages for r in page] == submitted
        claimed = await store.inbox.claim("w1", ttl=30)
        assert claimed is not None
        assert await store.inbox.list_requests(state=RUNNING) == [claimed]
        assert await store.inbox.list_requests(state="pending", thread_id="t0") == submitted[2::2]
        assert await store.inbox.list_requests(state=DEAD) == []

    @inbox_test
    async def test_progress_is_read_in_order_per_turn(self, h: InboxHarness) -> None:
        store = await h.open()
        inbox = store.inbox
        assert await inbox.append_progress("t1", "turn-a", ['{"type": "a", "n": 1}']) == 1
        items = ['{"type": "b", "n": 2}', '{"n": 3}', '{"type": "c", "n": 4}']
        assert await inbox.append_progress("t1", "turn-a", items) == 4
        assert await inbox.append_progress("t1", "turn-b", ['{"type": "x"}']) == 1
        entries = await inbox.read_progress("t1", "turn-a")
        assert [(e.seq, e.item) for e in entries] == [
            (1, {"type": "a", "n": 1}),
            (2, {"type": "b", "n": 2}),
            (3, {"type": "unreadable"}),  # not a stream item: a watcher skips it
            (4, {"type": "c", "n": 4}),
        ]
        assert await inbox.read_progress("t1", "turn-a", after=2) == entries[2:]
        assert await inbox.read_progress("t1", "turn-a", after=1, limit=2) == entries[1:3]
        assert await inbox.read_progress("t1", "turn-a", after=4) == []
        assert [e.item for e in await inbox.read_progress("t1", "turn-b")] == [{"type": "x"}]
        assert await inbox.read_progress("t2", "turn-a") == []

    @inbox_test
    async def test_prune_progress_removes_old_entries_but_never_renumbers_a_log(
        self, h: InboxHarness
    ) -> None:
        store = await h.open()
        inbox = store.inbox
        await inbox.append_progress("t1", "turn-a", ['{"type": "old"}'] * 2)
        await inbox.append_progress("t2", "turn-a", ['{"type": "old"}'])
        await inbox.append_progress("t3", "turn-a", ['{"type": "old"}'] * 2)
        await commit_turn(store, "t3", "turn-a")
        assert await inbox.prune_progress(older_than=datetime.now(UTC) - LATER) == 0
        await asyncio.sleep(h.claim_ttl)
        cutoff = datetime.now(UTC)
        await asyncio.sleep(h.claim_ttl)
        await inbox.append_progress("t1", "turn-a", ['{"type": "new"}'])
        # Old entries go, except the newest of a turn still running (t2's only one): its next
        # entry is numbered after it, so a watcher's cursor stays valid. A committed turn's
        # log goes entirely (its result is the truth).
        assert await inbox.prune_progress(older_than=cutoff) == 4
        kept = await inbox.read_progress("t1", "turn-a")
        assert [(e.seq, e.item) for e in kept] == [(3, {"type": "new"})]
        assert [e.seq for e in await inbox.read_progress("t2", "turn-a")] == [1]
        assert await inbox.read_progress("t3", "turn-a") == []
        assert await inbox.append_progress("t2", "turn-a", ['{"type": "new"}']) == 2
