"""Properties of which occurrences a scheduler submits (hypothesis), over random crons, zones,
grace periods and tick times across both daylight saving changes, against cronsim's own list
of occurrences:

- each occurrence is submitted at most once, and only once it has come;
- while ticks are closer together than the grace, every occurrence is submitted (none missed);
- after a gap longer than the grace, ``skip`` submits none of the occurrences more than the
  grace late and ``catch_up_one`` exactly the latest of them;
- what a round records as dealt with never goes back.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from intention_kernel.contracts.inbox import MissedRuns
from intention_kernel.kernel import Schedule, define_schedule

CRONS = ["* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *", "15,45 1-4 * * *", "0 3 * * *"]
ZONES = ["UTC", "Europe/Berlin", "Europe/Lisbon", "Europe/Helsinki", "Asia/Kathmandu"]
"""Zones without daylight saving time, and European ones, which change at 01:00 UTC."""
STARTS = [  # just before Europe's two DST changes of 2026 (March 29 and October 25, 01:00 UTC)
    datetime(2026, 3, 29, 0, 10, tzinfo=UTC),
    datetime(2026, 10, 25, 0, 10, tzinfo=UTC),
]


def _all(schedule: Schedule, since: datetime, until: datetime) -> list[datetime]:
    """Every occurrence in (since, until], from cronsim directly, in UTC and distinct."""
    found: list[datetime] = []
    for moment in CronSim(schedule.cron, since.astimezone(ZoneInfo(schedule.timezone))):
        utc = moment.astimezone(UTC)
        if utc > until:
            break
        if utc > since and utc not in found:
            found.append(utc)
    return sorted(found)


def _run(
    schedule: Schedule, start: datetime, ticks: list[datetime]
) -> tuple[list[datetime], list[datetime]]:
    """Tick at each time from ``start``, as one scheduler does: what it submitted, what it
    recorded."""
    since = start
    submitted: list[datetime] = []
    recorded: list[datetime] = []
    for now in ticks:
        due = schedule.due(since=since, now=now)
        assert all(since < t <= now for t in due.submits)
        submitted.extend(due.submits)
        if due.last is not None:
            recorded.append(due.last)
            since = due.last
    return submitted, recorded


schedules = st.builds(
    lambda cron, zone, grace, missed: define_schedule(
        "s", cron=cron, thread_id="t", text="x", timezone=zone, missed=missed, grace=grace
    ),
    st.sampled_from(CRONS),
    st.sampled_from(ZONES),
    st.sampled_from([60.0, 600.0, 3600.0]),
    st.sampled_from(list(MissedRuns)),
)


@settings(max_examples=200, deadline=None)
@given(schedules, st.sampled_from(STARTS), st.data())
def test_ticks_closer_than_the_grace_submit_every_occurrence_once(
    schedule: Schedule, start: datetime, data: st.DataObject
) -> None:
    grace = int(schedule.grace)
    closer = st.integers(grace // 2, grace - 1)  # each step under the grace, hours in all
    steps = data.draw(st.lists(closer, min_size=100, max_size=300))
    ticks, now = [], start
    for seconds in steps:
        now += timedelta(seconds=seconds)
        ticks.append(now)
    submitted, recorded = _run(schedule, start, ticks)
    assert submitted == _all(schedule, start, ticks[-1])
    assert recorded == sorted(recorded)


@settings(max_examples=150, deadline=None)
@given(schedules, st.sampled_from(STARTS), st.integers(0, 86_400), st.integers(1, 2 * 86_400))
def test_after_a_gap_only_the_policy_decides_what_ran(
    schedule: Schedule, start: datetime, before: int, gap: int
) -> None:
    last_tick = start + timedelta(seconds=before)
    back = last_tick + timedelta(seconds=gap)
    submitted, _ = _run(schedule, start, [last_tick, back])
    expected = _policy(schedule, start, last_tick) + _policy(schedule, last_tick, back)
    assert submitted == expected
    assert len(set(submitted)) == len(submitted)


def _policy(schedule: Schedule, since: datetime, now: datetime) -> list[datetime]:
    """What a round at ``now`` must submit, read off cronsim's occurrences in (since, now]:
    the latest of those at least the grace late if the policy catches up, then the others."""
    grace = timedelta(seconds=schedule.grace)
    every = _all(schedule, since, now)
    late = [t for t in every if now - t >= grace]
    caught = [late[-1]] if late and schedule.missed is MissedRuns.CATCH_UP_ONE else []
    return caught + [t for t in every if now - t < grace]
