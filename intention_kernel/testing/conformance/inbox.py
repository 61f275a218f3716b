"""The turn inbox conformance suite: what every store's ``InboxStorage`` must do.

The rules are those of ``contracts.inbox`` (states, the claim rule) and of the role: a request
is ``done`` if and only if its turn committed. A store runs the suite by subclassing
``InboxConformance`` and providing an ``inbox_harness`` fixture::

    import pytest
    from intention_kernel.testing.conformance.inbox import (
        UNREADABLE_PAYLOAD, InboxConformance, InboxHarness)

    class MyInboxHarness(InboxHarness):
        def __init__(self, directory):
            super().__init__()
            self.path = directory / "inbox.db"

        async def _open(self):
            return await MyDurability.open(self.path)  # a store with ``store.inbox``

        async def corrupt_request(self, thread_id, turn_id, payload=UNREADABLE_PAYLOAD):
            ...  # optional: write ``payload`` into the request row, as a disk fault could

    class TestMyInbox(InboxConformance):
        @pytest.fixture
        def inbox_harness(self, tmp_path):
            return MyInboxHarness(tmp_path)

Claim expiry and retry times are checked with real sleeps of ``InboxHarness.claim_ttl``
seconds, because SQL stores use the database clock. The suite needs pytest; it runs each test
in a fresh event loop, so no asyncio pytest plugin is needed.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ...contracts.errors import CheckpointCorruptError, ErrorCode, TurnConflictError, UsageError
from ...durability._inbox_rows import encode_payload
from ._inbox_handoff import InboxHandOff
from ._inbox_support import (
    DEAD,
    DONE,
    LATER,
    PENDING,
    RUNNING,
    UNREADABLE_PAYLOAD,
    InboxHarness,
    InboxReads,
    InboxStore,
    claim_program,
    commit_turn,
    inbox_test,
    refused,
    submit,
)
from ._schedules import ScheduleConformance

__all__ = [
    "UNREADABLE_PAYLOAD",
    "InboxConformance",
    "InboxHarness",
    "InboxStore",
    "ScheduleConformance",
    "commit_turn",
    "inbox_test",
]


class InboxConformance(InboxReads, InboxHandOff):
    """Every inbox test. Subclass it (with a ``Test`` prefix), define ``inbox_harness``."""

    @inbox_test
    async def test_submit_is_idempotent_on_its_ids(self, h: InboxHarness) -> None:
        store = await h.open()
        options: dict[str, Any] = {"selection": {"model": "m"}, "host_context": {"user": "u"}}
        first = await submit(store, "t1", "turn-1", **options)
        assert (first.state, first.attempts, first.key) == (PENDING, 0, ("t1", "turn-1"))
        assert (first.selection, first.host_context) == ({"model": "m"}, {"user": "u"})
        assert first.position > 0 and first.submitted_at.tzinfo is not None
        again = await submit(store, "t1", "turn-1", **options)
        assert again == first
        assert await store.inbox.list_requests() == [first]
        assert await store.inbox.get("t1", "turn-1") == first

    @inbox_test
    async def test_submit_of_an_id_with_another_fingerprint_fails(self, h: InboxHarness) -> None:
        store = await h.open()
        first = await submit(store, "t1", "turn-1", text="book a room")
        with pytest.raises(TurnConflictError) as error:
            await submit(store, "t1", "turn-1", text="cancel it", fingerprint="fp-other")
        assert error.value.code is ErrorCode.TURN_ID_REUSED
        assert await store.inbox.list_requests() == [first]
        assert (await store.inbox.stats()).pending == 1

    @inbox_test
    async def test_submit_of_a_committed_turn_is_done_writing_nothing(
        self, h: InboxHarness
    ) -> None:
        store = await h.open()
        await commit_turn(store, "t1", "turn-1", fingerprint="fp-run")
        found = await submit(store, "t1", "turn-1", fingerprint="fp-run")
        assert (found.state, found.key, found.fingerprint) == (DONE, ("t1", "turn-1"), "fp-run")
        assert await store.inbox.get("t1", "turn-1") is None
        with pytest.raises(TurnConflictError) as error:
            await submit(store, "t1", "turn-1", fingerprint="fp-other")
        assert error.value.code is ErrorCode.TURN_ID_REUSED
        assert await store.inbox.list_requests() == []
        assert await store.inbox.claim("w1", ttl=30) is None

    @inbox_test
    async def test_claim_rule_takes_a_thread_in_order_one_at_a_time(self, h: InboxHarness) -> None:
        store = await h.open()
        a = await submit(store, "t1", "turn-a")
        b = await submit(store, "t1", "turn-b")
        first = await store.inbox.claim("w1", ttl=30)
        assert first is not None and first.key == a.key
        assert (first.state, first.claimed_by, first.attempts) == (RUNNING, "w1", 1)
        assert first.claimed_until is not None and first.claimed_until > first.submitted_at
        assert await store.inbox.claim("w2", ttl=30) is None  # the head is running
        await store.inbox.release("w1", *a.key, retry_in=LATER.total_seconds())
        assert await store.inbox.claim("w2", ttl=30) is None  # the head is pending (not due)
        await store.inbox.retry(*a.key, actor="ops", note="now")  # attempts from 0 again
        again = await store.inbox.claim("w2", ttl=30)
        assert again is not None and (again.key, again.attempts) == (a.key, 1)
        await commit_turn(store, *a.key)
        second = await store.inbox.claim("w1", ttl=30)
        assert second is not None and second.key == b.key

    @inbox_test
    async def test_claim_rule_runs_threads_in_parallel(self, h: InboxHarness) -> None:
        store = await h.open()
        heads = [await submit(store, f"t{i}", "turn-a") for i in range(3)]
        for i in range(3):
            await submit(store, f"t{i}", "turn-b")
        claimed = [await store.inbox.claim(f"w{i}", ttl=30) for i in range(4)]
        assert [c.key if c else None for c in claimed] == [*(r.key for r in heads), None]

    @inbox_test
    async def test_claim_rule_not_before_holds_back_only_its_thread(self, h: InboxHarness) -> None:
        store = await h.open()
        later = datetime.now(UTC) + LATER
        waiting = await submit(store, "t1", "turn-a", not_before=later)
        assert waiting.state is PENDING and abs(waiting.not_before - later) < timedelta(seconds=1)
        await submit(store, "t1", "turn-b")
        other = await submit(store, "t2", "turn-a", not_before=datetime.now(UTC) - LATER)
        claimed = await store.inbox.claim("w1", ttl=30)
        assert claimed is not None and claimed.key == other.key
        assert await store.inbox.claim("w2", ttl=30) is None

    @inbox_test
    async def test_claim_rule_takes_over_an_expired_claim(self, h: InboxHarness) -> None:
        store = await h.open()
        request = await submit(store, "t1", "turn-a")
        await submit(store, "t1", "turn-b")
        assert await store.inbox.claim("w1", ttl=h.claim_ttl) is not None
        assert await store.inbox.claim("w2", ttl=30) is None
        await asyncio.sleep(h.claim_ttl * 1.5)
        taken = await store.inbox.claim("w2", ttl=30)
        assert taken is not None and taken.key == request.key
        assert (taken.claimed_by, taken.attempts, taken.state) == ("w2", 2, RUNNING)
        # The old holder holds nothing: no renewal, no release.
        assert await store.inbox.renew("w1", ttl=30) == []
        assert await store.inbox.release("w1", *request.key, retry_in=None) is None
        assert await store.inbox.get(*request.key) == taken
        assert await store.inbox.claim("w3", ttl=30) is None  # turn-b waits for w2

    @inbox_test
    async def test_claim_rule_a_dead_request_holds_back_nothing(self, h: InboxHarness) -> None:
        store = await h.open()
        await submit(store, "t1", "turn-a")
        b = await submit(store, "t1", "turn-b")
        claimed = await store.inbox.claim("w1", ttl=30)
        assert claimed is not None
        dead = await store.inbox.release("w1", *claimed.key, retry_in=None, error="poison")
        assert dead is not None and dead.state is DEAD
        following = await store.inbox.claim("w2", ttl=30)
        assert following is not None and following.key == b.key

    @inbox_test
    async def test_renew_keeps_claims_alive_for_their_holder_only(self, h: InboxHarness) -> None:
        store = await h.open()
        keys = [(await submit(store, f"t{i}", "turn-a")).key for i in range(2)]
        await submit(store, "t2", "turn-a")
        for _ in keys:
            assert await store.inbox.claim("w1", ttl=h.claim_ttl) is not None
        other = await store.inbox.claim("w2", ttl=h.claim_ttl)
        assert other is not None and other.key == ("t2", "turn-a")
        assert sorted(await store.inbox.renew("w1", ttl=30)) == sorted(keys)
        assert await store.inbox.renew("w3", ttl=30) == []
        await asyncio.sleep(h.claim_ttl * 1.5)
        taken = await store.inbox.claim("w3", ttl=30)
        assert taken is not None and taken.key == other.key  # w2 did not renew
        assert await store.inbox.claim("w3", ttl=30) is None
        for key in keys:
            held = await store.inbox.get(*key)
            assert held is not None and (held.state, held.claimed_by) == (RUNNING, "w1")
        assert sorted(await store.inbox.renew("w1", ttl=30)) == sorted(keys)
        assert await store.inbox.renew("w2", ttl=30) == []

    @inbox_test
    async def test_commit_marks_the_request_done_in_the_same_step(self, h: InboxHarness) -> None:
        store = await h.open()
        a = await submit(store, "t1", "turn-a")
        b = await submit(store, "t1", "turn-b")
        assert await store.inbox.claim("w1", ttl=30) is not None
        await commit_turn(store, *a.key, fingerprint=a.fingerprint)
        done = await store.inbox.get(*a.key)
        assert done is not None and (done.state, done.claimed_by) == (DONE, None)
        assert done.finished_at is not None and done.finished_at >= done.submitted_at
        following = await store.inbox.claim("w2", ttl=30)
        assert following is not None and following.key == b.key
        # A turn committed while its request waits (a direct run of the id) is done too.
        await submit(store, "t2", "turn-a")
        await commit_turn(store, "t2", "turn-a")
        direct = await store.inbox.get("t2", "turn-a")
        assert direct is not None and direct.state is DONE
        stats = await store.inbox.stats()
        assert (stats.pending, stats.running, stats.dead) == (0, 1, 0)

    @inbox_test
    async def test_release_after_a_commit_leaves_the_request_done(self, h: InboxHarness) -> None:
        store = await h.open()
        for index, retry_in in enumerate((None, 0.0)):
            request = await submit(store, f"t{index}", "turn-a")
            assert await store.inbox.claim("w1", ttl=30) is not None
            await commit_turn(store, *request.key)
            released = await store.inbox.release(
                "w1", *request.key, retry_in=retry_in, error_code="LATE", error="late"
            )
            assert released is None or released.state is DONE, released
            stored = await store.inbox.get(*request.key)
            assert stored is not None and stored.state is DONE
        assert await store.inbox.claim("w2", ttl=30) is None

    @inbox_test
    async def test_release_with_retry_in_is_pending_and_due_then(self, h: InboxHarness) -> None:
        store = await h.open()
        request = await submit(store, "t1", "turn-a")
        await submit(store, "t1", "turn-b")
        assert await store.inbox.claim("w1", ttl=30) is not None
        released = await store.inbox.release(
            "w1", *request.key, retry_in=h.claim_ttl, error_code="BUSY", error="model busy"
        )
        assert released is not None
        assert (released.state, released.claimed_by, released.attempts) == (PENDING, None, 1)
        assert (released.error_code, released.error) == ("BUSY", "model busy")
        assert await store.inbox.claim("w2", ttl=30) is None
        await asyncio.sleep(h.claim_ttl * 1.5)
        again = await store.inbox.claim("w2", ttl=30)
        assert again is not None and (again.key, again.attempts) == (request.key, 2)

    @inbox_test
    async def test_release_without_retry_in_is_dead_with_its_error(self, h: InboxHarness) -> None:
        store = await h.open()
        request = await submit(store, "t1", "turn-a")
        assert await store.inbox.claim("w1", ttl=30) is not None
        dead = await store.inbox.release(
            "w1", *request.key, retry_in=None, error_code="CAPABILITY_FAILED", error="no card"
        )
        assert dead is not None and (dead.state, dead.claimed_by) == (DEAD, None)
        assert (dead.error_code, dead.error, dead.attempts) == ("CAPABILITY_FAILED", "no card", 1)
        assert dead.finished_at is not None
        assert await store.inbox.get(*request.key) == dead
        assert await store.inbox.claim("w2", ttl=30) is None

    @inbox_test
    async def test_release_without_the_claim_changes_nothing(self, h: InboxHarness) -> None:
        store = await h.open()
        request = await submit(store, "t1", "turn-a")
        assert await store.inbox.release("w1", *request.key, retry_in=None) is None  # pending
        claimed = await store.inbox.claim("w1", ttl=30)
        assert claimed is not None
        assert await store.inbox.release("w2", *request.key, retry_in=None) is None
        assert await store.inbox.release("w2", *request.key, retry_in=0) is None
        assert await store.inbox.release("w1", "t1", "turn-x", retry_in=None) is None
        assert await store.inbox.get(*request.key) == claimed

    @inbox_test
    async def test_mark_done_marks_only_a_committed_turn(self, h: InboxHarness) -> None:
        store = await h.open()
        request = await submit(store, "t1", "turn-a")
        claimed = await store.inbox.claim("w1", ttl=30)
        assert await store.inbox.mark_done(*request.key) is False
        assert await store.inbox.get(*request.key) == claimed
        await commit_turn(store, *request.key)
        assert await store.inbox.mark_done(*request.key) is True
        done = await store.inbox.get(*request.key)
        assert done is not None and done.state is DONE

    @inbox_test
    async def test_operator_retry_makes_a_dead_request_due(self, h: InboxHarness) -> None:
        store = await h.open()
        request = await submit(store, "t1", "turn-a")
        assert await store.inbox.claim("w1", ttl=30) is not None
        await store.inbox.release("w1", *request.key, retry_in=None, error="boom")
        retried = await store.inbox.retry(*request.key, actor="ops-1", note="provider fixed")
        assert (retried.state, retried.claimed_by, retried.attempts) == (PENDING, None, 0)
        [record] = retried.operator_log
        assert (record.action, record.actor, record.note) == ("retry", "ops-1", "provider fixed")
        assert record.previous_state is DEAD and record.at.tzinfo is not None
        assert await store.inbox.get(*request.key) == retried
        again = await store.inbox.claim("w2", ttl=30)
        assert again is not None and (again.key, again.attempts) == (request.key, 1)
        assert again.operator_log == retried.operator_log

    @inbox_test
    async def test_operator_cancel_makes_a_pending_request_dead(self, h: InboxHarness) -> None:
        store = await h.open()
        request = await submit(store, "t1", "turn-a")
        b = await submit(store, "t1", "turn-b")
        cancelled = await store.inbox.cancel(*request.key, actor="ops-1", note="user left")
        assert cancelled.state is DEAD and cancelled.attempts == 0
        [record] = cancelled.operator_log
        assert (record.action, record.actor, record.note) == ("cancel", "ops-1", "user left")
        assert record.previous_state is PENDING
        claimed = await store.inbox.claim("w1", ttl=30)
        assert claimed is not None and claimed.key == b.key

    @inbox_test
    async def test_operators_refuse_other_states_and_unknown_ids(self, h: InboxHarness) -> None:
        store = await h.open()
        running = await submit(store, "t1", "turn-a")
        done = await submit(store, "t2", "turn-a")
        dead = await submit(store, "t3", "turn-a", not_before=datetime.now(UTC) + LATER)
        assert await store.inbox.claim("w1", ttl=30) is not None
        assert await store.inbox.claim("w1", ttl=30) is not None
        await commit_turn(store, *done.key)
        await store.inbox.cancel(*dead.key, actor="ops", note="stop")
        before = await store.inbox.list_requests()
        inbox = store.inbox
        cases = [(inbox.retry, key) for key in (running.key, done.key)]
        cases += [(inbox.cancel, key) for key in (running.key, done.key, dead.key)]
        for action, key in cases:
            with pytest.raises(UsageError) as error:
                await action(*key, actor="ops", note="again")
            refused(error.value, UsageError, ErrorCode.REQUEST_STATE_CONFLICT)
        for action in (inbox.retry, inbox.cancel):
            with pytest.raises(UsageError) as error:
                await action("t9", "turn-a", actor="ops", note="who")
            refused(error.value, UsageError, ErrorCode.REQUEST_NOT_FOUND)
        assert await store.inbox.list_requests() == before

    @inbox_test
    async def test_claim_dead_letters_a_corrupt_row_in_its_thread(self, h: InboxHarness) -> None:
        store = await h.open()
        bad = await submit(store, "t1", "turn-a")
        later = await submit(store, "t1", "turn-b")
        other = await submit(store, "t2", "turn-a")
        await h.corrupt_request(*bad.key)
        with pytest.raises(CheckpointCorruptError):
            await store.inbox.get(*bad.key)
        assert await store.inbox.list_requests() == [later, other]  # skipped, not fatal
        claimed = [await store.inbox.claim(worker, ttl=30) for worker in ("w1", "w2")]
        assert {c.key for c in claimed if c} == {later.key, other.key}  # t1 goes on past it
        stats = await store.inbox.stats()
        assert (stats.pending, stats.running, stats.dead) == (0, 2, 1)
        await h.corrupt_request(*bad.key, payload=encode_payload(None, None))
        dead = await store.inbox.get(*bad.key)
        assert dead is not None and (dead.state, dead.claimed_by) == (DEAD, None)
        assert dead.error_code == ErrorCode.CHECKPOINT_CORRUPT and dead.error

    @inbox_test
    async def test_requests_survive_a_restart(self, h: InboxHarness) -> None:
        store = await h.open()
        running = await submit(store, "t1", "turn-a", selection={"model": "m"})
        following = await submit(store, "t1", "turn-b", host_context={"user": "u"})
        retried = await submit(store, "t2", "turn-a")
        assert await store.inbox.claim("w1", ttl=60) is not None
        assert await store.inbox.claim("w2", ttl=60) is not None
        await store.inbox.release("w2", *retried.key, retry_in=None, error="boom")
        await store.inbox.retry(*retried.key, actor="ops", note="again")
        assert await store.inbox.claim("w2", ttl=60) is not None
        await store.inbox.release("w2", *retried.key, retry_in=3600, error_code="BUSY")
        before = await store.inbox.list_requests()
        stats = await store.inbox.stats()
        if h.durable:
            await store.close()
        reopened = await h.open()
        assert await reopened.inbox.list_requests() == before
        assert await reopened.inbox.stats() == stats
        assert await reopened.inbox.claim("w3", ttl=60) is None  # t1 held, t2 waiting
        assert await reopened.inbox.renew("w1", ttl=60) == [running.key]
        await commit_turn(reopened, *running.key)
        claimed = await reopened.inbox.claim("w3", ttl=60)
        assert claimed is not None and claimed.key == following.key
        assert claimed.host_context == {"user": "u"}

    @inbox_test
    async def test_concurrent_claimers_keep_the_claim_rule(self, h: InboxHarness) -> None:
        """Seeded programs of 5 concurrent claimers over 4 threads of 5 requests (see
        ``claim_program``): never two live claims on a thread, claims in submission order."""
        stores = [await h.open(), await h.open()]
        for seed in range(h.claim_programs):
            await claim_program(
                stores, random.Random(seed), f"p{seed}", workers=5, threads=4, per_thread=5
            )
