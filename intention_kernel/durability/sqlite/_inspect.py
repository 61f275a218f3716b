"""The ``StoreInspector`` hooks of ``SQLiteDurability``: operator queries, lease probe, retention.

Kept out of ``_adapter`` so the turn hooks stay readable; mixed into ``SQLiteDurability``.
The lease probe takes the thread's lock file with ``LOCK_SH | LOCK_NB`` and drops it at once:
it never waits, and a holder is never disturbed (a waiting writer retries within milliseconds).
``/proc/locks`` names the holding process on Linux.

The same probe tells interrupted ``prepared`` receipts (no live holder of the thread's lock: the
turn ended before recording the outcome) from those of a running turn; the former are listed and
counted as uncertain (see ``_ledger.needs_operator``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ...contracts.inspect import LeaseInfo, PruneReport, SchemaInfo, StoreStatus, ThreadSummary
from .._documents import PRUNED_TURN, head_problem
from ..storage import ThreadQuery
from ._connection import Connection
from ._errors import translate_errors
from ._lease import LockFiles
from ._location import parse_location
from ._schema import SCHEMA_VERSION, stored_version

__all__ = [
    "RECEIPT_COLUMNS",
    "SQLiteInspection",
    "awaiting_operator",
    "lease_probe",
    "read_schema_info",
]

_LIVE = ("uncertain", "prepared")
RECEIPT_COLUMNS = (
    "thread_id, idempotency_key, receipt_id, capability_id, status, updated_us,"
    " CAST(document AS BLOB) FROM ik_receipts"
)
"""``SELECT`` these for ``_adapter._listed_receipt``."""


def _pending(version: int) -> tuple[str, ...]:
    return tuple(f"{n}: schema version {n}" for n in range(version + 1, SCHEMA_VERSION + 1))


def read_schema_info(location: str | os.PathLike[str]) -> SchemaInfo:
    """The schema of a database file, read without migrating (``migrate --dry-run``)."""
    path = parse_location(location)
    if not path.exists():
        return SchemaInfo(version=0, supported=SCHEMA_VERSION, pending=_pending(0))
    with translate_errors(what="open"):
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            version = stored_version(conn)
        finally:
            conn.close()
    return SchemaInfo(version=version, supported=SCHEMA_VERSION, pending=_pending(version))


def _holder(path: Path) -> str | None:
    """``pid N (command)`` of the process holding an ``flock`` on ``path``, from /proc/locks."""
    try:
        info = path.stat()
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    wanted = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->" or fields[1] != "FLOCK":
            continue
        if fields[5] != wanted:
            continue
        pid = fields[4]
        command = ""
        with contextlib.suppress(OSError):
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            command = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
        return f"pid {pid}" + (f" ({command[:120]})" if command else "")
    return None


def _probe(path: Path) -> bool:
    """True when another open file description holds the lock file."""
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def lease_probe(locks: LockFiles) -> Callable[[str], bool]:
    """``held(thread_id)``: whether a live holder has the thread's lock file (a ``_probe``,
    remembered for the call that made it). Lock files are never deleted, so a missing one
    means the thread was never leased here."""
    seen: dict[str, bool] = {}

    def held(thread_id: str) -> bool:
        if thread_id not in seen:
            with translate_errors(what="lock file", thread_id=thread_id):
                seen[thread_id] = _probe(locks.path_for(thread_id))
        return seen[thread_id]

    return held


def _interrupted(
    conn: sqlite3.Connection, held: Callable[[str], bool], thread_id: str | None = None
) -> list[Any]:
    """``RECEIPT_COLUMNS`` rows of the ``prepared`` receipts whose thread's lock nobody
    holds, oldest update first (few: a prepared receipt is in flight or was interrupted)."""
    clause, args = ("", ()) if thread_id is None else (" AND thread_id = ?", (thread_id,))
    rows = conn.execute(
        f"SELECT {RECEIPT_COLUMNS} WHERE status = 'prepared'{clause}"
        " ORDER BY updated_us, receipt_id",
        args,
    ).fetchall()
    return [row for row in rows if not held(row[0])]


def awaiting_operator(
    conn: sqlite3.Connection, held: Callable[[str], bool], *, thread_id: str | None, limit: int
) -> list[tuple[Any, ...]]:
    """``RECEIPT_COLUMNS`` rows of the receipts waiting for an operator, oldest update first:
    ``uncertain`` ones (through the status index) and interrupted ``prepared`` ones."""
    clause, args = ("", ()) if thread_id is None else (" AND thread_id = ?", (thread_id,))
    uncertain = conn.execute(
        f"SELECT {RECEIPT_COLUMNS} WHERE status = 'uncertain'{clause}"
        " ORDER BY updated_us, receipt_id LIMIT ?",
        (*args, limit),
    ).fetchall()
    rows = sorted(uncertain + _interrupted(conn, held, thread_id), key=lambda r: (r[5], r[2]))
    return rows[:limit]


def _micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _older(text: str | None, cutoff: datetime) -> bool:
    return text is not None and datetime.fromisoformat(text) < cutoff


class SQLiteInspection:
    """``InspectionStorage`` over one SQLite ``Connection`` and the thread lock files."""

    def __init__(self, db: Connection, locks: LockFiles) -> None:
        self._db = db
        self._locks = locks

    async def list_threads(self, query: ThreadQuery) -> list[ThreadSummary]:
        held = lease_probe(self._locks)

        def read(conn: sqlite3.Connection) -> list[ThreadSummary]:
            rows: list[ThreadSummary] = []
            after = query.after or ""
            # The SQL keeps a superset (whether a prepared receipt is interrupted depends on
            # the lock files); ``keeps`` decides on each summary. Candidates come in id order,
            # a page's worth at a time, until the page is full.
            while len(rows) < query.limit:
                sql, args = _candidates(query, after)
                found = conn.execute(sql, args).fetchall()
                for thread_id, committed in found:
                    summary = _summary(conn, thread_id, held)
                    has_head = summary.head_turn_id is not None
                    if query.keeps(summary, fingerprint=committed, has_head=has_head):
                        rows.append(summary)
                        if len(rows) == query.limit:
                            break
                if len(found) < query.limit:
                    break
                after = found[-1][0]
            return rows

        return await self._db.read(read)

    async def status(self) -> StoreStatus:
        held = lease_probe(self._locks)

        def read(conn: sqlite3.Connection) -> StoreStatus:
            def one(sql: str) -> int:
                return int(conn.execute(sql).fetchone()[0])

            return StoreStatus(
                schema_version=stored_version(conn),
                threads=one(
                    "SELECT count(*) FROM (SELECT thread_id FROM ik_heads"
                    " UNION SELECT thread_id FROM ik_receipts)"
                ),
                turns=one(f"SELECT count(*) FROM ik_turns WHERE result != '{PRUNED_TURN}'"),
                corrupt_threads=one(
                    "SELECT count(*) FROM ik_heads AS h LEFT JOIN ik_turns AS t"
                    " ON t.thread_id = h.thread_id AND t.turn_id = h.turn_id"
                    f" WHERE t.result IS NULL OR NOT {_VALID}"
                    f" OR {_FINGERPRINT_TYPE} IS NOT 'text'"
                ),
                uncertain_receipts=one(
                    "SELECT count(*) FROM ik_receipts WHERE status = 'uncertain'"
                )
                + len(_interrupted(conn, held)),
                undelivered_events=one(
                    "SELECT count(*) FROM ik_outbox WHERE delivered_at IS NULL AND dead = 0"
                ),
                dead_events=one("SELECT count(*) FROM ik_outbox WHERE dead = 1"),
                backend="sqlite",
            )

        return await self._db.read(read)

    async def schema_info(self) -> SchemaInfo:
        version = await self._db.read(stored_version)
        return SchemaInfo(version=version, supported=SCHEMA_VERSION, pending=_pending(version))

    async def lease_info(self, thread_id: str) -> LeaseInfo:
        row = await self._db.read(
            lambda conn: conn.execute(
                "SELECT epoch FROM ik_leases WHERE thread_id = ?", (thread_id,)
            ).fetchone()
        )
        path = self._locks.path_for(thread_id)
        with translate_errors(what="lock file", thread_id=thread_id):
            held = _probe(path)
        return LeaseInfo(
            thread_id=thread_id,
            held=held,
            epoch=None if row is None else int(row[0]),
            holder=_holder(path) if held else None,
            mechanism=f"flock on {path} (released when the holding process exits)",
        )

    async def prune_records(self, older_than: datetime, dry_run: bool) -> PruneReport:

        def run(conn: sqlite3.Connection) -> PruneReport:
            report = PruneReport(cutoff=older_than, dry_run=dry_run)
            # A live receipt that cannot be read back keeps every turn of its thread.
            live = {
                (thread, turn)
                for thread, turn in conn.execute(
                    "SELECT thread_id, CASE WHEN json_valid(document)"
                    " THEN json_extract(document, '$.turn_id') END FROM ik_receipts"
                    f" WHERE status IN {_LIVE}"
                )
            }
            live |= {tuple(row) for row in conn.execute("SELECT thread_id, turn_id FROM ik_heads")}
            for seq, thread, turn, committed in conn.execute(
                "SELECT seq, thread_id, turn_id, committed_at FROM ik_turns WHERE result != ?"
                " ORDER BY seq",
                (PRUNED_TURN,),
            ).fetchall():
                if not _older(committed, older_than):
                    continue
                if (thread, turn) in live or (thread, None) in live:
                    report.kept_turns += 1
                    continue
                report.turns.append((thread, turn))
                if not dry_run:
                    conn.execute("UPDATE ik_turns SET result = ? WHERE seq = ?", (PRUNED_TURN, seq))
            # delivered_us is set with delivered_at by the outbox source (indexed for prune).
            report.events = [
                int(row[0])
                for row in conn.execute(
                    "SELECT position FROM ik_outbox WHERE delivered_us IS NOT NULL"
                    " AND delivered_us < ? AND dead = 0 ORDER BY position",
                    (_micros(older_than),),
                )
            ]
            if not dry_run:
                conn.executemany(
                    "DELETE FROM ik_outbox WHERE position = ?", [(p,) for p in report.events]
                )
            return report

        if dry_run:
            return await self._db.read(run)
        return await self._db.write(run)


_VALID = "json_valid(t.result)"
_FINGERPRINT_TYPE = (
    f"CASE WHEN {_VALID} THEN json_type(t.result, '$.checkpoint.agent_fingerprint') END"
)


_OPEN = "('uncertain', 'prepared')"
_CORRUPT = (
    "CASE WHEN h.thread_id IS NULL THEN 0 ELSE (SELECT CASE WHEN t.result IS NULL"
    " OR NOT json_valid(t.result) THEN 1"
    " ELSE json_type(t.result, '$.checkpoint.agent_fingerprint') IS NOT 'text' END"
    " FROM (SELECT 1) LEFT JOIN ik_turns AS t"
    " ON t.thread_id = h.thread_id AND t.turn_id = h.turn_id) END"
)
"""SQL, on a head row ``h``: its document cannot be read back (``head_problem``)."""


def _head_clauses(query: ThreadQuery, args: list[Any]) -> list[str]:
    """SQL conditions on a head row ``h`` (``NULL`` columns for a thread without one)."""
    clauses = []
    if query.pending is not None:
        clauses.append(f"h.pending_interaction IS {'NOT ' if query.pending else ''}NULL")
    if query.corrupt is not None:
        clauses.append(f"({_CORRUPT}) = {int(query.corrupt)}")
    if query.fingerprint_not_in is not None:
        marks = ", ".join("?" for _ in query.fingerprint_not_in)
        clauses.append(
            "h.thread_id IS NOT NULL AND (h.agent_fingerprint IS NULL"
            f" OR h.agent_fingerprint NOT IN ({marks}))"
        )
        args.extend(sorted(query.fingerprint_not_in))
    return clauses


def _id_clauses(
    alias: str, query: ThreadQuery, start: str, after: str, args: list[Any]
) -> list[str]:
    """SQL conditions on ``alias.thread_id``: the page (from ``start``, after ``after``), the
    prefix, and no uncertain receipt when ``uncertain=False``; their arguments go to ``args``."""
    clauses = [f"{alias}.thread_id >= ?", f"{alias}.thread_id > ?"]
    args += [start, after]
    if query.prefix:
        clauses.append(f"substr({alias}.thread_id, 1, ?) = ?")
        args += [len(query.prefix), query.prefix]
    if query.uncertain is False:
        clauses.append(
            f"NOT EXISTS (SELECT 1 FROM ik_receipts AS o WHERE o.thread_id = {alias}.thread_id"
            " AND o.status = 'uncertain')"
        )
    return clauses


def _candidates(query: ThreadQuery, after: str) -> tuple[str, list[Any]]:
    """One page of candidate ``(thread_id, committed agent fingerprint)`` in id order."""
    start = max(after, query.prefix or "")
    if query.uncertain:
        # Few threads have open receipts: start from them (partial index).
        args: list[Any] = []
        clauses = ["r.status IN " + _OPEN, *_id_clauses("r", query, start, after, args)]
        clauses += _head_clauses(query, args)
        sql = (
            "SELECT DISTINCT r.thread_id, h.agent_fingerprint FROM ik_receipts AS r"
            " INDEXED BY ik_receipts_open"
            " LEFT JOIN ik_heads AS h ON h.thread_id = r.thread_id"
            f" WHERE {' AND '.join(clauses)} ORDER BY r.thread_id LIMIT ?"
        )
        return sql, [*args, query.limit]
    args = []
    clauses = _id_clauses("h", query, start, after, args)
    clauses += _head_clauses(query, args)
    sql = (
        f"SELECT h.thread_id, h.agent_fingerprint FROM ik_heads AS h WHERE {' AND '.join(clauses)}"
    )
    head_only = query.pending or query.corrupt or query.fingerprint_not_in is not None
    if not head_only:
        # Threads with receipts and no head yet (a turn that ran effects, then failed).
        receipt = [
            *_id_clauses("r", query, start, after, args),
            "NOT EXISTS (SELECT 1 FROM ik_heads AS h WHERE h.thread_id = r.thread_id)",
            # One row per thread, found in primary key order (no sort, so the merge with the
            # heads stops at the page size).
            "r.idempotency_key = (SELECT min(k.idempotency_key) FROM ik_receipts AS k"
            " WHERE k.thread_id = r.thread_id)",
        ]
        sql += (
            " UNION ALL SELECT r.thread_id, NULL FROM ik_receipts AS r"
            f" WHERE {' AND '.join(receipt)}"
        )
    return sql + " ORDER BY 1 LIMIT ?", [*args, query.limit]


def _summary(
    conn: sqlite3.Connection, thread_id: str, held: Callable[[str], bool]
) -> ThreadSummary:
    # ``json_extract`` fails on text that is not JSON: guarded, so one corrupt head is
    # reported on its own thread instead of failing the listing.
    head = conn.execute(
        f"SELECT h.revision, h.turn_id, CASE WHEN {_FINGERPRINT_TYPE} = 'text'"
        " THEN json_extract(t.result, '$.checkpoint.agent_fingerprint') END,"
        f" t.result IS NULL, coalesce({_VALID}, 0), h.pending_interaction FROM ik_heads AS h"
        " LEFT JOIN ik_turns AS t ON t.thread_id = h.thread_id AND t.turn_id = h.turn_id"
        " WHERE h.thread_id = ?",
        (thread_id,),
    ).fetchone()
    turns, last = conn.execute(
        "SELECT count(*), max(committed_at) FROM ik_turns WHERE thread_id = ? AND result != ?",
        (thread_id, PRUNED_TURN),
    ).fetchone()
    uncertain = conn.execute(
        "SELECT count(*) FROM ik_receipts WHERE thread_id = ? AND status = 'uncertain'",
        (thread_id,),
    ).fetchone()[0]
    return ThreadSummary(
        thread_id=thread_id,
        revision=0 if head is None else int(head[0]),
        head_turn_id=None if head is None else head[1],
        fingerprint=None if head is None else head[2],
        turns=int(turns),
        last_commit_at=None if last is None else datetime.fromisoformat(last),
        uncertain_receipts=int(uncertain) + len(_interrupted(conn, held, thread_id)),
        corrupt=None
        if head is None
        else head_problem(missing=bool(head[3]), valid=bool(head[4]), fingerprint=head[2]),
        pending_interaction=None if head is None else head[5],
    )
