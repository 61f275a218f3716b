"""The SQLite inbox's rows: stored times, rows read back, and what a turn's commit writes.

Times are kept as UTC ISO text of fixed width (``iso``), so comparing the text compares the
times. ``mark_done`` is the inbox's part of ``SQLiteTurns.commit``: the turn's request done and
the last progress items, in the commit's own transaction.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ...contracts.inbox import InboxRequest
from .._inbox_rows import COLUMNS, decode_request

__all__ = [
    "ROW_COLUMNS",
    "SELECT_ROWS",
    "by_key",
    "committed",
    "decoded",
    "iso",
    "later",
    "mark_done",
    "read_row",
    "read_time",
    "record_progress",
    "select_row",
]

_BLOBS = frozenset({"text", "payload", "operator_log"})
"""Read as bytes: text that is not UTF-8 reads back as corrupt instead of failing the query."""
ROW_COLUMNS = ", ".join(f"CAST({c} AS BLOB)" if c in _BLOBS else c for c in COLUMNS)
"""A stored request's columns as ``read_row`` takes them (a select list or ``RETURNING``)."""
SELECT_ROWS = f"SELECT {ROW_COLUMNS} FROM ik_inbox"


def iso(moment: datetime) -> str:
    """A time as stored: UTC, with microseconds (fixed width: text order is time order)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def read_time(text: str | None) -> datetime | None:
    """A stored time read back (``None`` if missing or unreadable)."""
    try:
        return None if text is None else datetime.fromisoformat(text)
    except ValueError:
        return None


def later(moment: datetime, seconds: float) -> str:
    return iso(moment + timedelta(seconds=seconds))


def read_row(found: tuple[Any, ...]) -> dict[str, Any]:
    row = dict(zip(COLUMNS, found, strict=True))
    text = row["text"]
    if isinstance(text, bytes):
        # Not UTF-8: left as bytes, so ``decode_request`` reports the row as corrupt.
        with contextlib.suppress(UnicodeDecodeError):
            row["text"] = text.decode("utf-8")
    return row


def select_row(
    conn: sqlite3.Connection, where: str, args: tuple[Any, ...]
) -> dict[str, Any] | None:
    found = conn.execute(f"{SELECT_ROWS} WHERE {where}", args).fetchone()
    return None if found is None else read_row(found)


def by_key(conn: sqlite3.Connection, thread_id: str, turn_id: str) -> dict[str, Any] | None:
    return select_row(conn, "thread_id = ? AND turn_id = ?", (thread_id, turn_id))


def committed(conn: sqlite3.Connection, thread_id: str, turn_id: str) -> bool:
    found = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM ik_turns WHERE thread_id = ? AND turn_id = ?)",
        (thread_id, turn_id),
    ).fetchone()
    return bool(found[0])


def decoded(row: Mapping[str, Any] | None) -> InboxRequest | None:
    return None if row is None else decode_request(row)


def mark_done(
    conn: sqlite3.Connection,
    thread_id: str,
    turn_id: str,
    now: datetime,
    progress: Sequence[str] = (),
) -> None:
    """What a commit does to the turn's request and progress log (inside
    ``SQLiteTurns.commit``)."""
    conn.execute(
        "UPDATE ik_inbox SET state = 'done', finished_at = ?, claimed_by = NULL,"
        " claimed_until = NULL WHERE thread_id = ? AND turn_id = ? AND state <> 'done'",
        (iso(now), thread_id, turn_id),
    )
    if progress:
        record_progress(conn, thread_id, turn_id, progress, now)


def record_progress(
    conn: sqlite3.Connection, thread_id: str, turn_id: str, items: Sequence[str], now: datetime
) -> int:
    (last,) = conn.execute(
        "SELECT coalesce(max(seq), 0) FROM ik_progress WHERE thread_id = ? AND turn_id = ?",
        (thread_id, turn_id),
    ).fetchone()
    at = iso(now)
    conn.executemany(
        "INSERT INTO ik_progress (thread_id, turn_id, seq, item, written_at)"
        " VALUES (?, ?, ?, ?, ?)",
        [(thread_id, turn_id, last + n, text, at) for n, text in enumerate(items, 1)],
    )
    return int(last) + len(items)
