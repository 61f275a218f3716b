"""The pure parts of ``bench/inbox_turns.py``: statements named by what they do, quantiles,
``strace`` and ``EXPLAIN`` output read back, and the accounting of an inbox turn's extra CPU.

- PostgreSQL statements are named from their SQL text (each is its own transaction); a claim
  that returned no row is an ``empty claim``.
- SQLite statements (the trace callback's expanded SQL) are grouped as sent, a ``BEGIN`` ..
  ``COMMIT`` transaction or a lone statement, and each group is named by what it holds.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from typing import Any

PG_STATEMENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("claim", re.compile(r"\.inbox_claim\(")),
    ("submit", re.compile(r"\bWITH existing AS\b")),
    ("submit that claims", re.compile(r"\.inbox_submit_claimed\(")),
    ("turn commit", re.compile(r"\bhead AS\b")),  # it may write progress items too
    ("progress append", re.compile(r"INSERT INTO \S+\.progress\b")),
    ("read progress", re.compile(r"SELECT seq, item FROM")),
    ("renew", re.compile(r"SET claimed_until = clock_timestamp\(\)")),
    ("mark done", re.compile(r"\bmarked AS\b")),
    ("release", re.compile(r"THEN 'dead' ELSE 'pending'")),
    ("get request", re.compile(r"FROM \S+\.inbox WHERE thread_id = \$1 AND turn_id = \$2")),
    ("turn open", re.compile(r"\bacquired AS\b")),
    ("lease renew", re.compile(r"\.leases SET expires_at = clock_timestamp\(\)")),
    ("lease release", re.compile(r"\.leases SET expires_at = '-infinity'")),
    ("read turn", re.compile(r"FROM \S+\.turns WHERE thread_id = \$1 AND turn_id = \$2")),
)
SQLITE_STATEMENTS: tuple[tuple[str, str], ...] = (
    ("submit", "INSERT INTO ik_inbox "),
    ("claim", "FROM ik_inbox AS r"),
    ("turn commit", "INSERT INTO ik_turns "),
    ("progress append", "INSERT INTO ik_progress "),
    ("progress append", "PRAGMA synchronous"),  # set to NORMAL around a progress write
    ("renew", "UPDATE ik_inbox SET claimed_until"),
    ("mark done", "UPDATE ik_inbox SET state = 'done'"),
    ("read progress", "FROM ik_progress"),
    ("turn open", "CAST(p.result AS BLOB)"),
    ("get request", "FROM ik_inbox WHERE"),
)


def pg_statement_kind(query: str, result: Any) -> str:
    """What a PostgreSQL statement of the store does; a claim that found nothing is an
    ``empty claim``."""
    flat = " ".join(query.split())
    for name, pattern in PG_STATEMENTS:
        if pattern.search(flat):
            if name == "claim" and result is None:
                return "empty claim"
            return name
    return "other"


def sqlite_units(statements: Sequence[str]) -> list[list[str]]:
    """Statements grouped as sent: a ``BEGIN`` .. ``COMMIT`` transaction, or one statement."""
    units: list[list[str]] = []
    current: list[str] | None = None
    for statement in statements:
        head = statement.lstrip().upper()
        if head.startswith("BEGIN"):
            if current:
                units.append(current)
            current = [statement]
        elif current is not None:
            current.append(statement)
            if head.startswith(("COMMIT", "END", "ROLLBACK")):
                units.append(current)
                current = None
        else:
            units.append([statement])
    if current:
        units.append(current)
    return units


def sqlite_unit_kind(unit: Sequence[str]) -> str:
    """What a SQLite transaction (or lone statement) of the store does."""
    text = "\n".join(unit)
    for name, marker in SQLITE_STATEMENTS:
        if marker in text:
            if name == "claim" and "SET state = 'running'" not in text:
                return "empty claim"
            if name == "submit" and "'running'" in text:
                return "submit that claims"
            return name
    return "other"


def sqlite_breakdown(statements: Sequence[str]) -> dict[str, dict[str, int]]:
    """Statements and write transactions by what they do."""
    out: dict[str, dict[str, int]] = {}
    for unit in sqlite_units(statements):
        entry = out.setdefault(sqlite_unit_kind(unit), {"statements": 0, "transactions": 0})
        entry["statements"] += len(unit)
        if unit[0].lstrip().upper().startswith("BEGIN"):
            entry["transactions"] += 1
    return out


def percentile(values: Sequence[float], share: float) -> float:
    """The ``share`` quantile (0..1) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    at = (len(ordered) - 1) * share
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(seconds) * 1000, 3),
        "p95_ms": round(percentile(seconds, 0.95) * 1000, 3),
        "max_ms": round(max(seconds) * 1000, 3),
    }


def median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


PARTS = (
    "submit",
    "submit that claims",
    "claim",
    "empty claim",
    "progress append",
    "get request",
    "release",
)


def strace_fsyncs(text: str) -> int:
    """Calls of ``fsync`` and ``fdatasync`` in an ``strace -c`` summary."""
    total = 0
    for line in text.splitlines():
        found = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)$", line)
        if found:
            total += int(found.group(1))
    return total


def accounting(report: dict[str, Any]) -> list[dict[str, Any]]:
    """What the inbox's own calls should add to a turn's CPU (calls per turn from the count
    runs x each call's CPU alone), against the difference measured (inbox - direct)."""
    parts = {p["store"]: p for p in report["parts"]}
    counts = {(c["store"], c["turn"], c["clients"]): c for c in report["statements"]}
    out: list[dict[str, Any]] = []
    for cell in report["cpu"]:
        key = (cell["store"], cell["turn"], cell["clients"])
        if cell["store"] not in parts or key not in counts:
            continue
        by_kind = counts[key]["inbox"]["by_kind"]
        alone = parts[cell["store"]]
        calls: dict[str, float] = {}
        added = 0.0
        for name in PARTS:
            if name not in by_kind:
                continue
            figures = by_kind[name]
            n = figures["transactions"] if cell["store"] == "sqlite" else figures["statements"]
            cost = (alone[name]["client_cpu_us"] or 0.0) + (alone[name]["server_cpu_us"] or 0.0)
            calls[name] = n
            added += n * cost
        inbox, direct = cell["median"]["inbox"], cell["median"]["direct"]
        measured = (
            None
            if inbox["cpu_us_per_turn"] is None or direct["cpu_us_per_turn"] is None
            else round(inbox["cpu_us_per_turn"] - direct["cpu_us_per_turn"], 1)
        )
        out.append(
            {
                "store": cell["store"],
                "turn": cell["turn"],
                "clients": cell["clients"],
                "inbox_calls_per_turn": calls,
                "their_cpu_us_per_turn": round(added, 1),
                "measured_difference_us": measured,
                "rest_us": None if measured is None else round(measured - added, 1),
            }
        )
    return out


BUFFERS = re.compile(r"Buffers: shared((?: [a-z]+=\d+)+)")
EXECUTION = re.compile(r"Execution Time: ([0-9.]+) ms")


def explain_figures(text: str) -> dict[str, Any]:
    """The top node's shared buffers (hit, read) and the execution time of an ``EXPLAIN
    (ANALYZE, BUFFERS)`` text (a node that touched no buffer prints no ``Buffers`` line)."""
    found = BUFFERS.search(text)
    counts = dict.fromkeys(("hit", "read"), 0)
    if found:
        for pair in found.group(1).split():
            name, _, value = pair.partition("=")
            counts[name] = int(value)
    executed = EXECUTION.search(text)
    return {
        "shared_hit": counts["hit"],
        "shared_read": counts["read"],
        "execution_ms": float(executed.group(1)) if executed else None,
    }


def notice_plan(notice: str) -> dict[str, str] | None:
    """An ``auto_explain`` notice as its query and plan."""
    head, _, rest = notice.partition("Query Text:")
    lines = rest.strip("\n").splitlines()
    if not lines:
        return None
    query: list[str] = []
    plan_from = 0
    for i, line in enumerate(lines):
        if "(cost=" in line or "(actual time=" in line:
            plan_from = i
            break
        query.append(line)
    return {
        "duration": head.strip(),
        "query": " ".join(" ".join(query).split()),
        "plan": "\n".join(lines[plan_from:]),
    }
