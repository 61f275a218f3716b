"""Schedules: definitions refused with typed errors, due occurrences (DST included), and the
scheduler against a real SQLite store on a clock the test moves."""

from __future__ import annotations

import asyncio
import itertools
import logging
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from intention_kernel import MissedRuns, define_agent, define_schedule
from intention_kernel.contracts.errors import (
    AgentCompilationError,
    DurabilityError,
    ErrorCode,
    InvalidInputError,
    KernelError,
    UsageError,
)
from intention_kernel.contracts.inbox import InboxRequest, Timer, occurrence_turn_id
from intention_kernel.durability import DurableStore
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.kernel import CompiledAgent, Kernel, Schedule, describe_schedule
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

from .support import Clock

BERLIN = ZoneInfo("Europe/Berlin")


def at(text: str, zone: Any = UTC) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=zone)


# ---------------------------------------------------------------- definitions


@pytest.mark.parametrize(
    ("options", "field", "code"),
    [
        ({"cron": "61 * * * *"}, "cron", ErrorCode.INVALID_SCHEDULE),
        ({"cron": "* * *"}, "cron", ErrorCode.INVALID_SCHEDULE),
        ({"cron": 5}, "cron", ErrorCode.INVALID_SCHEDULE),
        ({"timezone": "Mars/Olympus"}, "timezone", ErrorCode.INVALID_SCHEDULE),
        ({"timezone": "../../etc/passwd"}, "timezone", ErrorCode.INVALID_SCHEDULE),
        ({"missed": "later"}, "missed", ErrorCode.INVALID_SCHEDULE),
        ({"grace": 0}, "grace", ErrorCode.INVALID_SCHEDULE),
        ({"grace": float("nan")}, "grace", ErrorCode.INVALID_SCHEDULE),
        ({"grace": True}, "grace", ErrorCode.INVALID_SCHEDULE),
        ({"id": "a@b"}, "id", ErrorCode.INVALID_SCHEDULE),
        ({"id": "x" * 240}, "schedule_id", ErrorCode.INVALID_ID),
        ({"id": "a\u200bb"}, "schedule_id", ErrorCode.INVALID_ID),
        ({"thread_id": " "}, "thread_id", ErrorCode.INVALID_THREAD_ID),
        ({"text": "   "}, "text", ErrorCode.INVALID_TEXT),
        ({"text": "a\x00b"}, "text", ErrorCode.INVALID_TEXT),
    ],
)
def test_a_bad_schedule_is_refused_with_a_typed_error(
    options: dict[str, Any], field: str, code: ErrorCode
) -> None:
    chosen: dict[str, Any] = {
        "id": "digest",
        "cron": "0 8 * * *",
        "thread_id": "ops",
        "text": "Send the digest",
        **options,
    }
    with pytest.raises(InvalidInputError) as raised:
        define_schedule(chosen.pop("id"), **chosen)
    assert raised.value.code == code
    assert raised.value.context.get("field") == field
    assert not raised.value.retryable


def test_schedule_ids_must_be_unique_within_an_agent() -> None:
    twice = [define_schedule("d", cron="0 8 * * *", thread_id="t", text="x")] * 2
    agent = define_agent(id="a", version="1.0.0", description="d", schedules=twice)
    with pytest.raises(AgentCompilationError) as raised:
        Kernel(durability=MemoryDurability(), model=ScriptedModelGateway()).compile(agent)
    assert "duplicate_schedule" in str(raised.value)


def test_a_worker_with_schedules_needs_a_store_that_keeps_them() -> None:
    turns_only = DurableStore(MemoryDurability().roles.turns, inbox=MemoryDurability().roles.inbox)
    agent = _agent(turns_only, define_schedule("d", cron="0 8 * * *", thread_id="t", text="x"))
    with pytest.raises(UsageError) as raised:
        agent.worker()
    assert raised.value.code == ErrorCode.NOT_SUPPORTED
    assert agent.worker(schedules=False).scheduler is None


def test_the_turn_id_of_an_occurrence_names_its_utc_second() -> None:
    moment = at("2026-10-25T02:30:00", BERLIN)
    assert occurrence_turn_id("digest", moment) == "digest@2026-10-25T00:30:00Z"


# ---------------------------------------------------------------- which occurrences are due


def test_on_time_occurrences_and_missed_ones_by_policy() -> None:
    every_minute = define_schedule("m", cron="* * * * *", thread_id="t", text="x", grace=90)
    since, now = at("2026-01-01T10:00:00"), at("2026-01-01T10:05:20")
    due = every_minute.due(since=since, now=now)
    # 10:04 and 10:05 are less than 90 s late; 10:01 to 10:03 were missed: skipped.
    assert due.on_time == (at("2026-01-01T10:04:00"), at("2026-01-01T10:05:00"))
    assert due.catch_up is None and due.last == at("2026-01-01T10:05:00")
    catching = define_schedule(
        "m", cron="* * * * *", thread_id="t", text="x", grace=90, missed="catch_up_one"
    )
    caught = catching.due(since=since, now=now)
    assert caught.catch_up == at("2026-01-01T10:03:00")  # the latest missed one, only
    assert caught.submits == (at("2026-01-01T10:03:00"), *due.on_time)
    assert catching.due(since=now, now=now + timedelta(seconds=20)).submits == ()


def test_an_occurrence_exactly_grace_late_is_missed() -> None:
    hourly = define_schedule("h", cron="0 * * * *", thread_id="t", text="x", grace=60)
    due = hourly.due(since=at("2026-01-01T09:30:00"), now=at("2026-01-01T10:01:00"))
    assert due.on_time == () and due.last == at("2026-01-01T10:00:00")


def test_spring_forward_runs_a_time_that_does_not_exist_once_after_the_gap() -> None:
    # 2026-03-29 in Berlin: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day.
    daily = define_schedule("d", cron="30 2 * * *", thread_id="t", text="x", timezone=BERLIN.key)
    due = daily.due(since=at("2026-03-28T12:00:00"), now=at("2026-03-29T12:00:00"))
    assert due.last == at("2026-03-29T03:00:00", BERLIN)  # 01:00 UTC
    assert daily.next_after(at("2026-03-29T03:00:00", BERLIN)) == at("2026-03-30T02:30", BERLIN)


def test_fall_back_runs_a_daily_time_once_and_an_hourly_one_in_both_hours() -> None:
    # 2026-10-25 in Berlin: 03:00 CEST falls back to 02:00 CET; 02:xx happens twice.
    since, until = at("2026-10-24T22:00:00"), at("2026-10-25T03:00:00")  # UTC
    daily = define_schedule("d", cron="30 2 * * *", thread_id="t", text="x", timezone=BERLIN.key)
    hourly = define_schedule("h", cron="0 * * * *", thread_id="t", text="x", timezone=BERLIN.key)
    assert _all_due(daily, since, until) == [at("2026-10-25T00:30:00")]
    twice = _all_due(hourly, since, until)
    assert [t.hour for t in twice] == [23, 0, 1, 2, 3]  # 01:00, 02:00 CEST, 02:00 CET, 03:00
    turn_ids = {occurrence_turn_id("h", t) for t in twice}
    assert len(turn_ids) == 5


def test_a_missed_occurrence_in_a_repeated_hour_is_caught_up() -> None:
    # 02:30 CEST on 2026-10-25 is 00:30 UTC; at 01:01 UTC the wall clock reads 02:01 CET, so
    # walking back by wall time alone finds the 24th's 02:30 first.
    daily = define_schedule(
        "d",
        cron="30 2 * * *",
        thread_id="t",
        text="x",
        timezone=BERLIN.key,
        grace=60,
        missed="catch_up_one",
    )
    due = daily.due(since=at("2026-10-25T00:10:00"), now=at("2026-10-25T01:01:00"))
    assert (due.catch_up, due.on_time, due.last) == (
        at("2026-10-25T00:30:00"),
        (),
        at("2026-10-25T00:30:00"),
    )


def _all_due(schedule: Schedule, since: datetime, until: datetime) -> list[datetime]:
    """Every occurrence in (since, until], as a scheduler ticking each minute submits them."""
    found: list[datetime] = []
    now = since
    while now < until:
        now += timedelta(minutes=1)
        due = schedule.due(since=since, now=now)
        found.extend(due.submits)
        since = due.last or since
    return found


# ---------------------------------------------------------------- the scheduler, on SQLite


def _agent(store: Any, *schedules: Schedule) -> CompiledAgent:
    definition = define_agent(
        id="scheduled", version="1.0.0", description="runs on a clock", schedules=schedules
    )
    model = ScriptedModelGateway(
        {"interpret": {"intentions": []}, "compose": {"text": "Done.", "citations": []}}
    )
    return Kernel(durability=store, model=model).compile(definition)


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> Any:
    store = await SQLiteDurability.open(tmp_path / "s.db")
    yield store
    await store.close()


async def requests(store: Any, thread_id: str) -> list[InboxRequest]:
    found = await store.inbox.list_requests(thread_id=thread_id, limit=1000)
    return sorted(found, key=lambda r: r.position)


async def test_two_schedulers_on_one_store_submit_each_occurrence_once(sqlite_store: Any) -> None:
    every_ten = define_schedule("ten", cron="*/10 * * * * *", thread_id="ops", text="tick")
    clock = Clock(at("2026-01-01T09:00:01"))
    first = _agent(sqlite_store, every_ten).scheduler(clock=clock)
    second = _agent(sqlite_store, every_ten).scheduler(clock=clock)
    await first.register()
    await second.register()
    for _ in range(6):
        clock.advance(5)
        await asyncio.gather(first.tick(), second.tick())
    found = await requests(sqlite_store, "ops")
    assert [r.turn_id for r in found] == [f"ten@2026-01-01T09:00:{s}Z" for s in ("10", "20", "30")]
    assert found[0].host_context == {
        "schedule_id": "ten",
        "occurrence": "2026-01-01T09:00:10+00:00",
        "catch_up": False,
    }
    assert first.submitted + second.submitted == 6  # both submitted each; one request each
    (row,) = await sqlite_store.schedules.list_schedules()
    assert row.last_occurrence == at("2026-01-01T09:00:30")


@pytest.mark.parametrize("missed", list(MissedRuns))
async def test_a_scheduler_back_after_a_gap_applies_the_missed_policy(
    sqlite_store: Any, missed: MissedRuns
) -> None:
    minute = define_schedule(
        "m", cron="* * * * *", thread_id="ops", text="tick", grace=30, missed=missed
    )
    clock = Clock(at("2026-01-01T09:00:05"))
    scheduler = _agent(sqlite_store, minute).scheduler(clock=clock)
    await scheduler.register()
    clock.advance(60)
    await scheduler.tick()  # 09:01 on time
    clock.now = at("2026-01-01T09:05:10")  # every scheduler was down: 09:02 to 09:04 missed
    restarted = _agent(sqlite_store, minute).scheduler(clock=clock)
    await restarted.register()
    await restarted.tick()
    found = await requests(sqlite_store, "ops")
    expected = ["09:01", "09:05"] if missed is MissedRuns.SKIP else ["09:01", "09:04", "09:05"]
    assert [r.turn_id for r in found] == [f"m@2026-01-01T{hm}:00Z" for hm in expected]
    catch_ups = [r.turn_id for r in found if r.host_context and r.host_context["catch_up"]]
    assert catch_ups == ([] if missed is MissedRuns.SKIP else ["m@2026-01-01T09:04:00Z"])


async def test_a_changed_schedule_counts_from_its_change_and_a_clock_going_back_repeats_nothing(
    sqlite_store: Any,
) -> None:
    clock = Clock(at("2026-01-01T09:00:00"))
    old = define_schedule("s", cron="0 * * * *", thread_id="ops", text="hourly", grace=3600)
    first = _agent(sqlite_store, old).scheduler(clock=clock)
    await first.register()
    clock.advance(3600)
    await first.tick()  # 10:00
    clock.advance(1800)
    new = define_schedule("s", cron="*/15 * * * *", thread_id="ops", text="quarterly", grace=3600)
    changed = _agent(sqlite_store, new).scheduler(clock=clock)
    await changed.register()  # at 10:30: 10:15 and 10:30 of the new cron are not due
    await changed.tick()
    clock.advance(900)
    await changed.tick()  # 10:45
    clock.advance(-1800)  # the wall clock jumps back half an hour
    await changed.tick()
    clock.advance(1800)
    await changed.tick()
    found = await requests(sqlite_store, "ops")
    assert [(r.turn_id[-9:-1], r.text) for r in found] == [
        ("10:00:00", "hourly"),
        ("10:45:00", "quarterly"),
    ]
    (row,) = await sqlite_store.schedules.list_schedules()
    info = describe_schedule(row, clock.now)
    assert (info.cron, info.text, info.next_occurrence) == (
        "*/15 * * * *",
        "quarterly",
        at("2026-01-01T11:00:00"),
    )
    assert info.anchor > at("2026-01-01T00:00:00")


async def test_a_failed_round_is_retried_and_records_nothing(
    sqlite_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = define_schedule("e", cron="* * * * * *", thread_id="ops", text="tick")
    clock = Clock(at("2026-01-01T09:00:00.5"))
    agent = _agent(sqlite_store, every)
    scheduler = agent.scheduler(clock=clock)
    await scheduler.register()
    clock.advance(1)
    storage = sqlite_store.inbox.storage
    real = storage.submit

    async def busy(*args: Any, **kwargs: Any) -> Any:
        raise DurabilityError("the store is busy", code=ErrorCode.STORE_BUSY)

    monkeypatch.setattr(storage, "submit", busy)
    with pytest.raises(KernelError, match="busy"):
        await scheduler.tick()
    assert (await sqlite_store.schedules.list_schedules())[0].last_occurrence is None
    monkeypatch.setattr(storage, "submit", real)
    await scheduler.tick()
    assert [r.turn_id for r in await requests(sqlite_store, "ops")] == ["e@2026-01-01T09:00:01Z"]


async def test_a_worker_runs_its_schedule_turns(tmp_path: Path) -> None:
    store = await SQLiteDurability.open(tmp_path / "w.db")
    try:
        every = define_schedule("e", cron="* * * * * *", thread_id="ops", text="tick")
        worker = _agent(store, every).worker(poll_interval=0.05)
        task = asyncio.create_task(worker.run())
        async with asyncio.timeout(10):
            while len(await store.list_turns("ops")) < 2:  # noqa: ASYNC110 - the store polled
                await asyncio.sleep(0.05)
        worker.stop()
        await asyncio.wait_for(task, 10)
        turns = [t.turn_id for t in await store.list_turns("ops")]
        seconds = [datetime.fromisoformat(t.split("@")[1].replace("Z", "+00:00")) for t in turns]
        assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(seconds))
        assert worker.scheduler is not None and worker.scheduler.submitted >= 2
    finally:
        await store.close()


async def test_a_timer_another_writer_changed_is_submitted_as_it_can_be_or_dropped(
    sqlite_store: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(at("2026-01-01T09:00:00"))
    rows = sqlite_store.schedules
    await rows.add_timer(Timer("ops", "ping", clock.now, "ping", {"x": 1}))
    await rows.add_timer(Timer("ops", "blank", clock.now, "", {"expire_interaction": "i"}))
    conn = sqlite3.connect(tmp_path / "s.db")
    with conn:
        conn.execute("UPDATE ik_timers SET payload = x'ff', due_at = 'soon'")
    conn.close()
    scheduler = _agent(sqlite_store).scheduler(clock=clock)
    with caplog.at_level(logging.WARNING, logger="intention_kernel.schedules"):
        await scheduler.tick()
    assert scheduler.fired == 2 and await rows.next_timer() is None
    [ping] = await requests(sqlite_store, "ops")  # blank text and no selection: refused
    assert (ping.turn_id, ping.text, ping.selection) == ("ping", "ping", None)
    assert "timer ops/blank refused, dropped: [INVALID_TEXT]" in caplog.text
