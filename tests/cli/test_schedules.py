"""``schedules`` on a real SQLite file: each schedule with its cron, zone, last and next run;
an unreadable stored definition shows without a next run; the table names every schedule."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.kernel import define_schedule

from .support import cli, cli_json

T0 = datetime(2026, 1, 5, 7, 0, tzinfo=UTC)


def _registered(path: Path) -> None:
    async def main() -> None:
        store = await SQLiteDurability.open(path)
        try:
            digest = define_schedule(
                "digest",
                cron="0 8 * * 1-5",
                thread_id="ops",
                text="Send the digest",
                timezone="Europe/Lisbon",
                missed="catch_up_one",
            )
            await store.schedules.register(digest.id, digest.definition(), T0)
            await store.schedules.advance("digest", datetime(2026, 1, 5, 8, 0, tzinfo=UTC))
            hourly = define_schedule("hourly", cron="0 * * * *", thread_id="ops", text="Hour")
            await store.schedules.register(hourly.id, hourly.definition(), T0)
        finally:
            await store.close()

    asyncio.run(main())


def test_schedules_lists_each_one_with_its_last_and_next_run(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _registered(path)
    data = cli_json("schedules", "--store", str(path))
    digest, hourly = data["schedules"]
    assert (digest["schedule_id"], digest["cron"], digest["timezone"]) == (
        "digest",
        "0 8 * * 1-5",
        "Europe/Lisbon",
    )
    assert digest["missed"] == "catch_up_one"
    assert digest["last_occurrence"] == "2026-01-05T08:00:00+00:00"
    assert digest["seen_at"] == "2026-01-05T07:00:00+00:00"
    upcoming = datetime.fromisoformat(digest["next_occurrence"])
    assert upcoming > datetime.now(UTC) and upcoming.weekday() < 5
    assert (upcoming.minute, upcoming.second) == (0, 0)
    assert hourly["last_occurrence"] is None and hourly["next_in"].startswith("in ")
    shown = cli("schedules", "--store", str(path))
    assert shown.exit_code == 0
    assert "digest" in shown.stdout and "hourly" in shown.stdout


def test_an_unreadable_definition_is_listed_without_a_next_run(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _registered(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE ik_schedules SET definition = '{' WHERE schedule_id = 'hourly'")
    conn.close()
    _, hourly = cli_json("schedules", "--store", str(path))["schedules"]
    assert (hourly["schedule_id"], hourly["next_occurrence"], hourly["cron"]) == (
        "hourly",
        None,
        "",
    )


def test_no_schedules_says_so(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    asyncio.run(_open_close(path))
    assert cli_json("schedules", "--store", str(path)) == {"schedules": []}
    assert "no schedules" in cli("schedules", "--store", str(path)).stdout


async def _open_close(path: Path) -> None:
    await (await SQLiteDurability.open(path)).close()


def test_a_row_another_writer_changed_is_listed_alone_and_repaired_by_a_scheduler(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    _registered(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE ik_schedules SET anchor = 'yesterday', last_occurrence = x'ff00',"
            " definition = x'ff' WHERE schedule_id = 'digest'"
        )
    conn.close()
    digest, hourly = cli_json("schedules", "--store", str(path))["schedules"]
    assert (digest["cron"], digest["next_occurrence"], digest["last_occurrence"]) == (
        "",
        None,
        None,
    )
    assert digest["anchor"].startswith("0001-01-01")
    assert hourly["cron"] == "0 * * * *"  # the other schedule is untouched

    async def register_again() -> tuple[datetime, datetime | None]:
        store = await SQLiteDurability.open(path)
        try:
            again = define_schedule("digest", cron="0 8 * * 1-5", thread_id="ops", text="Send")
            row = await store.schedules.register(again.id, again.definition(), T0)
            return row.anchor, row.last_occurrence
        finally:
            await store.close()

    assert asyncio.run(register_again()) == (T0, None)  # counts from this registration
