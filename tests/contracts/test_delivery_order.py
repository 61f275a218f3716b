"""``delivery_order``: threads interleave as their positions say; each thread's events go out
in ``(revision, sequence)`` order however its positions were numbered."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from intention_kernel.contracts.events import KernelEvent, StoredEvent
from intention_kernel.contracts.outbox import delivery_order

_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _stored(position: int, thread: str, revision: int, sequence: int) -> StoredEvent:
    event = KernelEvent(
        id=f"e-{thread}-{revision}-{sequence}",
        type="test.event",
        occurred_at=_AT,
        thread_id=thread,
        turn_id=f"turn-{revision}",
        sequence=sequence,
        correlation_id="c",
    )
    return StoredEvent(event=event, position=position, revision=revision)


# Per event: its thread, its place in the thread; positions are a shuffle of 1..n.
_events = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(1, 4), st.integers(0, 3)),
    unique=True,
    max_size=24,
).flatmap(
    lambda rows: st.permutations(range(1, len(rows) + 1)).map(
        lambda positions: [
            _stored(p, t, r, s) for p, (t, r, s) in zip(positions, rows, strict=True)
        ]
    )
)


@given(_events)
def test_each_thread_fills_its_positions_in_thread_order(events: list[StoredEvent]) -> None:
    ordered = delivery_order(events)
    assert sorted(e.event.id for e in ordered) == sorted(e.event.id for e in events)
    by_position = sorted(events, key=lambda e: e.position)
    # The threads take turns exactly as their positions do ...
    assert [e.event.thread_id for e in ordered] == [e.event.thread_id for e in by_position]
    # ... and within a thread the order is (revision, sequence).
    for thread in "abc":
        mine = [e.thread_order for e in ordered if e.event.thread_id == thread]
        assert mine == sorted(mine)


def test_positions_in_thread_order_are_kept_as_they_are() -> None:
    events = [_stored(1, "a", 1, 0), _stored(2, "b", 1, 0), _stored(3, "a", 1, 1)]
    assert delivery_order(reversed(events)) == events


def test_a_thread_numbered_backwards_still_goes_out_in_order() -> None:
    events = [_stored(1, "a", 2, 1), _stored(2, "b", 1, 0), _stored(3, "a", 2, 0)]
    assert [(e.event.thread_id, e.thread_order) for e in delivery_order(events)] == [
        ("a", (2, 0)),
        ("b", (1, 0)),
        ("a", (2, 1)),
    ]


def test_a_source_that_records_no_revision_keeps_its_position_order() -> None:
    """Revision 0 (a source written before revisions): sorting by ``(0, sequence)`` would put
    the second turn's first event before the first turn's last one."""
    events = [_stored(1, "a", 0, 0), _stored(2, "a", 0, 1), _stored(3, "a", 0, 0)]
    events[2] = events[2].model_copy(
        update={"event": events[2].event.model_copy(update={"turn_id": "turn-2", "id": "x"})}
    )
    assert delivery_order(reversed(events)) == events
