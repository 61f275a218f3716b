"""``schedules``: the store's schedules, for operators (what runs when, what ran last).

The rows are written by the schedulers of the agents' workers (``docs/schedules.md``); a
schedule removed from the code stays listed, with the time a scheduler last registered it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer

from ..operations._schedules import schedule_json, store_schedules
from ._common import JsonOpt, StoreOpt, emit, open_store, out, print_table, run

__all__ = ["register"]

_COLUMNS = ("schedule", "thread", "cron", "zone", "missed", "last run", "next run", "registered")


def register(app: typer.Typer) -> None:
    app.command("schedules")(list_schedules)


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def list_schedules(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Schedules by id: cron and zone, the last occurrence dealt with, the next one."""

    async def body() -> dict[str, Any]:
        now = datetime.now(UTC)
        async with open_store(store) as opened:
            found = await store_schedules(opened, now)
        return {"schedules": [schedule_json(info, now) for info in found]}

    data = run(as_json, body)

    def human() -> None:
        rows = data["schedules"]
        if not rows:
            out.print("no schedules", markup=False)
            return
        print_table(
            _COLUMNS,
            [
                (
                    r["schedule_id"],
                    r["thread_id"],
                    r["cron"],
                    r["timezone"],
                    r["missed"],
                    _when(r["last_occurrence"]),
                    f"{_when(r['next_occurrence'])} ({r['next_in']})",
                    _when(r["seen_at"]),
                )
                for r in rows
            ],
            ids=("schedule", "thread"),
        )

    emit(as_json, data, human)
