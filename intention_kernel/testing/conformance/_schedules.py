"""Conformance of the schedule parts of the inbox role (``store.schedules``, with its inbox).

A store with schedules runs these next to the inbox suite, with the same harness::

    class TestMySchedules(ScheduleConformance):
        @pytest.fixture
        def inbox_harness(self, tmp_path):
            return MyInboxHarness(tmp_path)

What holds on every store: a registration keeps the definition, its anchor moves only when the
definition changes, the latest occurrence never goes back, rows outlive a restart, bad input is
refused with nothing written; the submits of one occurrence by two schedulers (two store
instances, as two processes) are one request; timers come back when due, earliest first, once
per ids, and until dropped.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from ...contracts.errors import ErrorCode, InvalidInputError
from ...contracts.inbox import ScheduleRows, Timer, occurrence_turn_id
from ._inbox_support import PENDING, InboxHarness, InboxStore, inbox_test, submit

__all__ = ["ScheduleConformance"]

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
DEFINITION = {"cron": "0 8 * * *", "thread_id": "ops", "text": "digest", "timezone": "UTC"}


def _rows(store: InboxStore) -> ScheduleRows:
    rows = getattr(store, "schedules", None)
    assert isinstance(rows, ScheduleRows), "the store has no schedule rows (store.schedules)"
    return rows


def _same_moment(a: datetime | None, b: datetime) -> bool:
    return a is not None and abs(a - b) < timedelta(milliseconds=1)


class ScheduleConformance:
    """Every schedule test. Subclass it (with a ``Test`` prefix), define ``inbox_harness``."""

    @inbox_test
    async def test_a_registration_moves_its_anchor_only_when_the_definition_changes(
        self, h: InboxHarness
    ) -> None:
        rows = _rows(await h.open())
        first = await rows.register("digest", DEFINITION, T0)
        assert (first.schedule_id, first.last_occurrence) == ("digest", None)
        assert _same_moment(first.anchor, T0) and _same_moment(first.seen_at, T0)
        again = await rows.register("digest", dict(DEFINITION), T0 + timedelta(hours=1))
        assert _same_moment(again.anchor, T0)
        assert _same_moment(again.seen_at, T0 + timedelta(hours=1))
        changed = {**DEFINITION, "cron": "0 9 * * *"}
        moved = await rows.register("digest", changed, T0 + timedelta(hours=2))
        assert _same_moment(moved.anchor, T0 + timedelta(hours=2))
        assert '"0 9 * * *"' in moved.definition

    @inbox_test
    async def test_the_latest_occurrence_never_goes_back_and_outlives_a_restart(
        self, h: InboxHarness
    ) -> None:
        store = await h.open()
        rows = _rows(store)
        await rows.register("b", DEFINITION, T0)
        await rows.register("a", DEFINITION, T0)
        await rows.advance("a", T0 + timedelta(days=2))
        await rows.advance("a", T0 + timedelta(days=1))  # a scheduler behind: ignored
        await rows.advance("unknown", T0)  # no row is made for it
        if h.durable:
            await store.close()
        listed = await _rows(await h.open()).list_schedules()
        assert [r.schedule_id for r in listed] == ["a", "b"]
        assert _same_moment(listed[0].last_occurrence, T0 + timedelta(days=2))
        assert listed[1].last_occurrence is None

    @inbox_test
    async def test_bad_input_is_refused_and_nothing_is_written(self, h: InboxHarness) -> None:
        rows = _rows(await h.open())
        naive = datetime(2026, 1, 1, 8, 0)
        attempts = [
            ("\u200b", DEFINITION, T0, ErrorCode.INVALID_ID),
            ("x" * 300, DEFINITION, T0, ErrorCode.INVALID_ID),
            ("s", ["not", "a", "mapping"], T0, ErrorCode.INVALID_INPUT),
            ("s", {"value": float("nan")}, T0, ErrorCode.NON_FINITE_NUMBER),
            ("s", {"value": object()}, T0, ErrorCode.NOT_SERIALIZABLE),
            ("s", DEFINITION, naive, ErrorCode.INVALID_INPUT),
        ]
        for schedule_id, definition, now, code in attempts:
            with pytest.raises(InvalidInputError) as raised:
                await rows.register(schedule_id, definition, now)  # type: ignore[arg-type]
            assert raised.value.code == code, (schedule_id, raised.value)
        with pytest.raises(InvalidInputError):
            await rows.advance("s", naive)
        assert await rows.list_schedules() == []

    @inbox_test
    async def test_two_schedulers_submitting_one_occurrence_make_one_request(
        self, h: InboxHarness
    ) -> None:
        first, second = await h.open(), await h.open()
        turn_id = occurrence_turn_id("digest", T0)
        made = await asyncio.gather(
            *(submit(store, "ops", turn_id, fingerprint="fp-digest") for store in (first, second))
        )
        assert {(r.thread_id, r.turn_id, r.position, r.state) for r in made} == {
            ("ops", turn_id, made[0].position, PENDING)
        }
        listed = await first.inbox.list_requests(thread_id="ops")
        assert [r.turn_id for r in listed] == [turn_id]

    @inbox_test
    async def test_timers_come_back_when_due_earliest_first_until_dropped(
        self, h: InboxHarness
    ) -> None:
        store = await h.open()
        rows = _rows(store)
        assert await rows.next_timer() is None
        later = Timer("t1", "later", T0 + timedelta(seconds=10), "", {"expire_interaction": "i"})
        sooner = Timer("t2", "sooner", T0 + timedelta(seconds=5), "hello", None, {"actor": "a"})
        await rows.add_timer(later)
        await rows.add_timer(sooner)
        await rows.add_timer(Timer("t1", "later", T0, "other"))  # the same ids: the first stays
        assert _same_moment(await rows.next_timer(), sooner.due_at)
        assert await rows.due_timers(T0 + timedelta(seconds=4)) == []
        assert [t.turn_id for t in await rows.due_timers(T0 + timedelta(seconds=7))] == ["sooner"]
        if h.durable:
            await store.close()
            rows = _rows(await h.open())
        both = await rows.due_timers(T0 + timedelta(seconds=10))
        assert [(t.thread_id, t.turn_id, t.text) for t in both] == [
            ("t2", "sooner", "hello"),
            ("t1", "later", ""),
        ]
        assert (both[0].selection, both[0].host_context) == (None, {"actor": "a"})
        assert (both[1].selection, both[1].host_context) == ({"expire_interaction": "i"}, None)
        assert _same_moment(both[1].due_at, later.due_at)
        await rows.drop_timer("t2", "sooner")
        await rows.drop_timer("t2", "sooner")  # already gone: nothing
        assert [t.turn_id for t in await rows.due_timers(T0 + timedelta(days=1))] == ["later"]

    @inbox_test
    async def test_a_bad_timer_is_refused_and_nothing_is_written(self, h: InboxHarness) -> None:
        rows = _rows(await h.open())
        naive = datetime(2026, 1, 1, 8, 0)
        bad = [
            (Timer("t", "u", naive, "x"), ErrorCode.INVALID_INPUT),
            (Timer(" ", "u", T0, "x"), ErrorCode.INVALID_THREAD_ID),
            (Timer("t", "\u200b", T0, "x"), ErrorCode.INVALID_TURN_ID),
            (Timer("t", "u", T0, "x", {"v": object()}), ErrorCode.NOT_SERIALIZABLE),
            (Timer("t", "u", T0, "x", None, {"v": float("inf")}), ErrorCode.NON_FINITE_NUMBER),
        ]
        for timer, code in bad:
            with pytest.raises(InvalidInputError) as raised:
                await rows.add_timer(timer)
            assert raised.value.code == code, (timer, raised.value)
        with pytest.raises(InvalidInputError):
            await rows.add_timer("not a timer")  # type: ignore[arg-type]
        assert await rows.next_timer() is None
