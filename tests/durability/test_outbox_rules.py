"""The outbox delivery rules, table-tested once for every store (``durability/rules.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from intention_kernel.durability.rules import Candidate, FailedAttempt, claimable, failed_attempt

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = NOW + timedelta(seconds=30)
EARLIER = NOW - timedelta(seconds=30)


@pytest.mark.parametrize(
    ("attempts", "max_attempts", "permanent", "expected"),
    [
        (0, 3, False, FailedAttempt(1, False, NOW + timedelta(seconds=5))),
        (1, 3, False, FailedAttempt(2, False, NOW + timedelta(seconds=5))),
        (2, 3, False, FailedAttempt(3, True, None)),  # the last attempt dead-letters
        (7, 3, False, FailedAttempt(8, True, None)),  # already over: still dead
        (0, 1, False, FailedAttempt(1, True, None)),
        (0, 10, True, FailedAttempt(1, True, None)),  # permanent: dead at once
    ],
)
def test_failed_attempt_table(
    attempts: int, max_attempts: int, permanent: bool, expected: FailedAttempt
) -> None:
    got = failed_attempt(
        attempts, max_attempts=max_attempts, permanent=permanent, retry_in=5, now=NOW
    )
    assert got == expected


def _event(position: int, thread: str, **state: object) -> Candidate:
    fields: dict[str, object] = {"dead": False, "claimed_until": None, "next_attempt_at": None}
    fields.update(state)
    return Candidate(position, thread, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("events", "limit", "chosen"),
    [
        ([], 10, []),
        ([_event(1, "a"), _event(2, "b"), _event(3, "a")], 10, [1, 2, 3]),
        ([_event(1, "a"), _event(2, "b"), _event(3, "a")], 2, [1, 2]),
        # A dead event holds back its own thread only.
        ([_event(1, "a", dead=True), _event(2, "a"), _event(3, "b")], 10, [3]),
        # A live claim (any relay) holds back the thread; an expired claim is no claim.
        ([_event(1, "a", claimed_until=LATER), _event(2, "a"), _event(3, "b")], 10, [3]),
        ([_event(1, "a", claimed_until=EARLIER), _event(2, "a")], 10, [1, 2]),
        # Backing off: not due yet holds back the thread; due again is claimable.
        ([_event(1, "a", next_attempt_at=LATER), _event(2, "a"), _event(3, "b")], 10, [3]),
        ([_event(1, "a", next_attempt_at=NOW), _event(2, "a")], 10, [1, 2]),
    ],
)
def test_claimable_table(events: list[Candidate], limit: int, chosen: list[int]) -> None:
    assert claimable(events, now=NOW, limit=limit) == chosen


candidates = st.lists(
    st.builds(
        lambda thread, dead, claimed, due: (thread, dead, claimed, due),
        st.sampled_from("abc"),
        st.booleans(),
        st.booleans(),
        st.booleans(),
    ),
    max_size=20,
)


@given(candidates, st.integers(min_value=1, max_value=25))
def test_a_claim_is_a_prefix_of_each_threads_undelivered_sequence(
    rows: list[tuple[str, bool, bool, bool]], limit: int
) -> None:
    events = [
        Candidate(
            position,
            thread,
            dead,
            LATER if claimed else None,
            None if due else LATER,
        )
        for position, (thread, dead, claimed, due) in enumerate(rows, start=1)
    ]
    chosen = claimable(events, now=NOW, limit=limit)
    assert len(chosen) <= limit
    assert chosen == sorted(chosen)
    picked = set(chosen)
    for thread in "abc":
        own = [e.position for e in events if e.thread_id == thread]
        taken = [p for p in own if p in picked]
        assert taken == own[: len(taken)]  # never skips an earlier event of its thread
    for event in events:
        if event.position in picked:
            assert not event.dead and event.claimed_until is None and event.next_attempt_at is None
