"""Inbox conformance: a submit that is also the claim, and progress written by the commit.

Both save a write per submitted turn, and both must keep the rules a claim and an append keep:
a request handed to its submitter's worker is claimed only when it is its thread's head, and
progress a commit writes goes on the turn's log after what was appended before, only if the
turn committed.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from ...contracts.durability import TurnScope
from ...contracts.errors import InvalidInputError, TurnConflictError
from ._inbox_support import (
    DEAD,
    DONE,
    PENDING,
    RUNNING,
    InboxHarness,
    commit_turn,
    inbox_test,
    submit,
)
from ._support import make_result

__all__ = ["InboxHandOff"]


class InboxHandOff:
    """The hand-off and commit-progress tests (mixed into ``InboxConformance``)."""

    @inbox_test
    async def test_a_submit_with_a_claimer_claims_the_head_of_a_free_thread(
        self, h: InboxHarness
    ) -> None:
        store = await h.open()
        before = datetime.now(UTC)
        handed = await submit(store, "t1", "turn-a", claimer="w1", claim_ttl=30)
        assert (handed.state, handed.claimed_by, handed.attempts) == (RUNNING, "w1", 1)
        assert handed.claimed_until is not None and handed.claimed_until > before
        assert await store.inbox.get(*handed.key) == handed
        # It is a live claim: nobody else takes it or a later request of its thread.
        queued = await submit(store, "t1", "turn-b", claimer="w2", claim_ttl=30)
        assert (queued.state, queued.claimed_by, queued.attempts) == (PENDING, None, 0)
        assert await store.inbox.claim("w3", ttl=30) is None
        assert await store.inbox.renew("w1", ttl=30) == [handed.key]
        await commit_turn(store, *handed.key, fingerprint=handed.fingerprint)
        following = await store.inbox.claim("w2", ttl=30)
        assert following is not None and following.key == queued.key

    @inbox_test
    async def test_a_submit_with_a_claimer_leaves_what_must_wait_pending(
        self, h: InboxHarness
    ) -> None:
        store = await h.open()
        # Behind a pending request of its thread (not due yet: still the head).
        await submit(store, "t1", "turn-a", not_before=datetime(2999, 1, 1, tzinfo=UTC))
        behind = await submit(store, "t1", "turn-b", claimer="w1", claim_ttl=30)
        assert (behind.state, behind.claimed_by) == (PENDING, None)
        # Not due now itself.
        later = await submit(
            store,
            "t2",
            "turn-a",
            claimer="w1",
            claim_ttl=30,
            not_before=datetime(2999, 1, 1, tzinfo=UTC),
        )
        assert (later.state, later.claimed_by) == (PENDING, None)
        # A dead request holds nothing back (the claim rule's own exception).
        dead = await submit(store, "t3", "turn-a")
        assert await store.inbox.claim("w9", ttl=30) is not None
        await store.inbox.release("w9", *dead.key, retry_in=None, error_code="E", error="no")
        assert (await store.inbox.get(*dead.key)).state is DEAD  # type: ignore[union-attr]
        after_dead = await submit(store, "t3", "turn-b", claimer="w1", claim_ttl=30)
        assert (after_dead.state, after_dead.claimed_by) == (RUNNING, "w1")

    @inbox_test
    async def test_a_submit_with_a_claimer_of_a_known_id_changes_nothing(
        self, h: InboxHarness
    ) -> None:
        store = await h.open()
        first = await submit(store, "t1", "turn-a")
        again = await submit(store, "t1", "turn-a", claimer="w1", claim_ttl=30)
        assert again == first and again.state is PENDING
        await commit_turn(store, "t2", "turn-a", fingerprint="fp-t2-turn-a")
        done = await submit(store, "t2", "turn-a", claimer="w1", claim_ttl=30)
        assert done.state is DONE and await store.inbox.get("t2", "turn-a") is None
        with pytest.raises(TurnConflictError):
            await submit(store, "t1", "turn-a", claimer="w1", claim_ttl=30, fingerprint="fp-x")
        assert await store.inbox.list_requests() == [first]

    @inbox_test
    async def test_a_commit_appends_its_progress_after_the_log_so_far(
        self, h: InboxHarness
    ) -> None:
        store = await h.open()
        handed = await submit(store, "t1", "turn-a", claimer="w1", claim_ttl=30)
        assert await store.inbox.append_progress("t1", "turn-a", ['{"type": "a"}']) == 1

        async def operation(scope: TurnScope) -> None:
            await scope.commit(make_result(scope), progress=['{"type": "b"}', '{"type": "c"}'])

        await store.with_turn("t1", "turn-a", operation, request_fingerprint=handed.fingerprint)
        entries = await store.inbox.read_progress("t1", "turn-a")
        assert [(e.seq, e.item["type"]) for e in entries] == [(1, "a"), (2, "b"), (3, "c")]
        assert (await store.inbox.get("t1", "turn-a")).state is DONE  # type: ignore[union-attr]

    @inbox_test
    async def test_a_commit_that_is_refused_writes_no_progress(self, h: InboxHarness) -> None:
        store = await h.open()
        await commit_turn(store, "t1", "turn-a")

        async def skipping(scope: TurnScope) -> None:
            good = make_result(scope)
            stale = good.model_copy(
                update={"checkpoint": good.checkpoint.model_copy(update={"revision": 9})}
            )
            with pytest.raises(TurnConflictError):
                await scope.commit(stale, progress=['{"type": "lost"}'])
            with pytest.raises(InvalidInputError):
                await scope.commit(good, progress=[{"type": "not text"}])  # type: ignore[list-item]
            assert await store.inbox.read_progress("t1", "turn-b") == []
            await scope.commit(good, progress=['{"type": "kept"}'])
            with pytest.raises(TurnConflictError):  # committed: a second commit is refused
                await scope.commit(good, progress=['{"type": "again"}'])

        await store.with_turn("t1", "turn-b", skipping)
        entries = await store.inbox.read_progress("t1", "turn-b")
        assert [e.item for e in entries] == [{"type": "kept"}]

    @inbox_test
    async def test_concurrent_submits_with_claimers_claim_only_the_head(
        self, h: InboxHarness
    ) -> None:
        """Submits of one thread racing through two store objects (two processes' worth):
        one is claimed, and it is the thread's first in submission order."""
        stores = [await h.open(), await h.open()]
        for round_ in range(h.claim_programs * 4):
            thread_id = f"race-{round_}"
            await asyncio.gather(
                *(
                    submit(stores[i % 2], thread_id, f"turn-{i}", claimer=f"w{i}", claim_ttl=30)
                    for i in range(6)
                )
            )
            rows = await stores[0].inbox.list_requests(thread_id=thread_id)
            running = [r for r in rows if r.state is RUNNING]
            assert len(running) == 1, rows
            assert running[0].position == min(r.position for r in rows), rows
