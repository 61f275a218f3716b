"""The pure parts of ``bench/inbox_turns.py`` (``bench/_inbox_measure.py``): statements named
by what they do, quantiles, ``strace`` and ``EXPLAIN`` output, the accounting of a turn."""

from __future__ import annotations

from typing import Any

import pytest

from bench import _inbox_measure as m

CLAIM = 'SELECT thread_id, turn_id FROM "s".inbox_claim($1, $2::float8)'


def test_postgres_statements_are_named_by_what_they_do() -> None:
    assert m.pg_statement_kind(CLAIM, {"thread_id": "t"}) == "claim"
    assert m.pg_statement_kind(CLAIM, None) == "empty claim"
    submit = 'WITH existing AS (\n SELECT 1 FROM "s".inbox WHERE thread_id = $1\n), prior AS (..)'
    assert m.pg_statement_kind(submit, {}) == "submit"
    assert m.pg_statement_kind('WITH last AS (..) INSERT INTO "s".progress (x)', {}) == (
        "progress append"
    )
    assert m.pg_statement_kind("WITH prior AS (..), seen AS (..), acquired AS (..)", {}) == (
        "turn open"
    )
    assert m.pg_statement_kind("WITH fence AS (..),\nhead AS (..), done AS (..)", {}) == (
        "turn commit"
    )
    assert m.pg_statement_kind("SELECT 1", 1) == "other"


def test_sqlite_statements_are_grouped_in_transactions_and_named() -> None:
    statements = [
        "BEGIN IMMEDIATE",
        "SELECT thread_id FROM ik_inbox WHERE thread_id = 'a' AND turn_id = 't'",
        "INSERT INTO ik_inbox (thread_id) VALUES ('a')",
        "COMMIT",
        "BEGIN IMMEDIATE",
        "SELECT r.position FROM ik_inbox AS r WHERE r.state IN ('pending', 'running')",
        "UPDATE ik_inbox SET state = 'running', claimed_by = 'w' WHERE position = 1",
        "COMMIT",
        "BEGIN IMMEDIATE",
        "SELECT r.position FROM ik_inbox AS r WHERE r.state IN ('pending', 'running')",
        "COMMIT",
        "SELECT CAST(p.result AS BLOB), p.fingerprint FROM (SELECT 1) AS one",
        "PRAGMA synchronous",
        "PRAGMA synchronous = NORMAL",
        "BEGIN IMMEDIATE",
        "INSERT INTO ik_progress (thread_id) VALUES ('a')",
        "COMMIT",
        "PRAGMA synchronous = 2",
        "BEGIN IMMEDIATE",
        "INSERT INTO ik_turns (thread_id) VALUES ('a')",
        "UPDATE ik_inbox SET state = 'done' WHERE thread_id = 'a'",
        "COMMIT",
    ]
    units = m.sqlite_units(statements)
    assert [len(u) for u in units] == [4, 4, 3, 1, 1, 1, 3, 1, 4]
    assert m.sqlite_breakdown(statements) == {
        "submit": {"statements": 4, "transactions": 1},
        "claim": {"statements": 4, "transactions": 1},
        "empty claim": {"statements": 3, "transactions": 1},
        "turn open": {"statements": 1, "transactions": 0},
        "progress append": {"statements": 6, "transactions": 1},
        "turn commit": {"statements": 4, "transactions": 1},
    }


def test_quantiles_and_summaries() -> None:
    assert m.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.95) == pytest.approx(4.8)
    assert m.percentile([2.0], 0.95) == 2.0
    with pytest.raises(ValueError, match="no values"):
        m.percentile([], 0.5)
    assert m.summary_ms([0.001, 0.002, 0.003]) == {
        "median_ms": 2.0,
        "p95_ms": 2.9,
        "max_ms": 3.0,
    }
    assert m.median([None, 1.0, 3.0]) == 2.0
    assert m.median([None]) is None


def test_strace_summary() -> None:
    text = (
        "% time     seconds  usecs/call     calls    errors syscall\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        " 90.00    0.009000          30       300           fdatasync\n"
        " 10.00    0.001000          10       100         2 fsync\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        "100.00    0.010000          25       400         2 total\n"
    )
    assert m.strace_fsyncs(text) == 400


def test_explain_figures() -> None:
    text = (
        "Function Scan on inbox_claim  (cost=0.25..10.25 rows=1000 width=364)"
        " (actual time=0.2..0.2 rows=1 loops=1)\n"
        "  Buffers: shared hit=47 read=2 dirtied=1\n"
        "Planning:\n  Buffers: shared hit=9\nPlanning Time: 0.076 ms\nExecution Time: 0.717 ms"
    )
    assert m.explain_figures(text) == {"shared_hit": 47, "shared_read": 2, "execution_ms": 0.717}
    cold = (
        "Result  (cost=0.00..0.01 rows=1 width=4)\n  Buffers: shared read=3\nExecution Time: 1 ms"
    )
    assert m.explain_figures(cold) == {"shared_hit": 0, "shared_read": 3, "execution_ms": 1.0}


def test_an_auto_explain_notice_is_split_into_its_query_and_plan() -> None:
    notice = (
        "duration: 0.013 ms  plan:\nQuery Text: SELECT i.position FROM s.inbox i\n"
        "  WHERE i.state IN ('pending', 'running')\n"
        "Limit  (cost=0.14..0.93 rows=1 width=24) (actual time=0.01..0.01 rows=1 loops=1)\n"
        "  ->  Index Scan using inbox_ready on inbox i  (cost=0.14..15.94 rows=20 width=24)"
    )
    plan = m.notice_plan(notice)
    assert plan is not None
    assert plan["duration"] == "duration: 0.013 ms  plan:"
    assert (
        plan["query"] == "SELECT i.position FROM s.inbox i WHERE i.state IN ('pending', 'running')"
    )
    assert plan["plan"].startswith("Limit  (cost=")
    assert "Index Scan using inbox_ready" in plan["plan"]
    assert m.notice_plan("duration: 1 ms  plan:\nQuery Text:") is None


def _cell(store: str, inbox: float, direct: float) -> dict[str, Any]:
    return {
        "store": store,
        "turn": "one_read",
        "clients": 1,
        "median": {"inbox": {"cpu_us_per_turn": inbox}, "direct": {"cpu_us_per_turn": direct}},
    }


def test_accounting_weighs_each_call_by_its_count_per_turn() -> None:
    alone = {name: {"client_cpu_us": 10.0, "server_cpu_us": None} for name in m.PARTS}
    alone["submit"] = {"client_cpu_us": 100.0, "server_cpu_us": 50.0}
    report = {
        "cpu": [_cell("postgres", 1000.0, 600.0), _cell("sqlite", 900.0, 500.0)],
        "parts": [{"store": "postgres", **alone}, {"store": "sqlite", **alone}],
        "statements": [
            {
                "store": store,
                "turn": "one_read",
                "clients": 1,
                "inbox": {
                    "by_kind": {
                        "submit": {"statements": 1.0, "transactions": 1.0},
                        "empty claim": {"statements": 2.0, "transactions": 1.0},
                        "turn commit": {"statements": 1.0, "transactions": 1.0},
                    }
                },
            }
            for store in ("postgres", "sqlite")
        ],
    }
    postgres, sqlite = m.accounting(report)
    assert postgres["inbox_calls_per_turn"] == {"submit": 1.0, "empty claim": 2.0}
    assert postgres["their_cpu_us_per_turn"] == 170.0  # 150 + 2 x 10
    assert postgres["measured_difference_us"] == 400.0
    assert postgres["rest_us"] == 230.0
    assert sqlite["their_cpu_us_per_turn"] == 160.0  # transactions: 150 + 1 x 10
