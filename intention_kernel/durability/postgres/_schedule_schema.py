"""Migration 9 of the PostgreSQL store: schedules and timers (``_schedules``).

``schedules``: per schedule, the definition a scheduler last registered, the moment its
occurrences count from and the latest occurrence dealt with. ``timers``: turns to submit at a
time, found by ``due_at`` (``timers_due``), deleted once submitted.
"""

from __future__ import annotations

__all__ = ["SCHEDULE_MIGRATION"]

SCHEDULE_MIGRATION = """
    CREATE TABLE {s}.schedules (
        schedule_id     text PRIMARY KEY,
        definition      text NOT NULL,
        anchor          timestamptz NOT NULL,
        seen_at         timestamptz NOT NULL,
        last_occurrence timestamptz
    );
    CREATE TABLE {s}.timers (
        thread_id text NOT NULL,
        turn_id   text NOT NULL,
        due_at    timestamptz NOT NULL,
        text      text NOT NULL,
        payload   text NOT NULL,
        PRIMARY KEY (thread_id, turn_id)
    );
    CREATE INDEX timers_due ON {s}.timers (due_at);
    """
