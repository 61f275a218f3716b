"""The HTTP load test (``bench/http_load.py``): its pure parts (percentiles, plans, checks), and
a short bounded run of the command on SQLite (one server) and PostgreSQL (two servers on one
store, a repeat of a key going to the other one) whose checks must all pass."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from bench import http_load as load
from bench.http_load import Answer

# ---------------------------------------------------------------- percentiles and plans


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert load.percentile(values, 50) == 50.0
    assert load.percentile(values, 99) == 99.0
    assert load.percentile(values, 100) == 100.0
    assert load.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert load.percentile([7.0], 99) == 7.0
    assert load.percentile([], 50) is None
    with pytest.raises(ValueError, match="q must be"):
        load.percentile([1.0], 0)


def test_plans_cycle_read_order_confirm_and_are_seeded() -> None:
    steps = [load.plan_step(random.Random(5), 2, n, 0.2, 0.1) for n in range(1, 7)]
    assert [s.key for s in steps] == [f"c2-t{n}" for n in range(1, 7)]
    assert steps[0].text == "look up topic-2-1"
    assert steps[1].text == "order c2-i2"
    assert steps[2].text == "yes"
    assert steps[2].confirms == "c2-i2"
    assert steps[5].confirms == "c2-i5"
    assert all(s.confirms is None for s in (steps[0], steps[1], steps[3], steps[4]))
    again = [load.plan_step(random.Random(5), 2, n, 0.2, 0.1) for n in range(1, 7)]
    assert again == steps


def test_plan_modes_follow_the_shares() -> None:
    rng = random.Random(1)
    modes = [load.plan_step(rng, 0, n, 0.2, 0.1).mode for n in range(1, 10_001)]
    share = {mode: modes.count(mode) / len(modes) for mode in load.MODES}
    assert share["timeout"] == pytest.approx(0.1, abs=0.02)
    assert share["repeat"] == pytest.approx(0.1, abs=0.02)
    assert share["concurrent"] == pytest.approx(0.1, abs=0.02)
    assert share["once"] == pytest.approx(0.7, abs=0.02)
    none = {load.plan_step(rng, 0, n, 0.0, 0.0).mode for n in range(1, 200)}
    assert none == {"once"}


# ---------------------------------------------------------------- checks


def body(text: str, replayed: bool, revision: int = 1) -> dict[str, Any]:
    return {
        "thread_id": "t",
        "turn_id": "k1",
        "replayed": replayed,
        "response": {"text": text, "kind": "answer", "citations": [], "steps": []},
        "interaction": None,
        "checkpoint": {"revision": revision},
    }


def answer(kind: str, replayed: bool | None, text: str = "hello", **changes: Any) -> Answer:
    fields: dict[str, Any] = {
        "status": 200,
        "replayed": replayed,
        "replayed_header": replayed,
        "body": None if replayed is None else body(text, replayed),
    }
    fields.update(changes)
    return Answer("t", "k1", kind, **fields)


def test_answers_that_agree_pass() -> None:
    answers = [
        answer("first", False),
        answer("repeat", True),
        answer("verify", True),
        Answer("t", "k1", "conflict", 409, code="TURN_ID_REUSED"),
    ]
    assert load.check_answers(answers) == []


def test_an_answer_that_differs_from_its_replay_fails() -> None:
    problems = load.check_answers([answer("first", False), answer("verify", True, text="other")])
    assert problems == ["t/k1: the verify answer differs from the first one"]


def test_a_5xx_or_an_unexpected_status_fails() -> None:
    problems = load.check_answers(
        [
            answer("first", False),
            Answer("t", "k1", "retry", 503, code="TURN_TIMEOUT"),
            Answer("t", "k1", "repeat", 422, code="INVALID_TURN"),
        ]
    )
    assert problems == [
        "t/k1 (retry, server 0): 503 TURN_TIMEOUT",
        "t/k1 (repeat, server 0): status 422 INVALID_TURN",
    ]


def test_running_a_key_twice_fails() -> None:
    problems = load.check_answers([answer("first", False), answer("repeat", False)])
    assert "t/k1: 2 answers say they ran the turn" in problems
    assert "t/k1: the repeat delivery was not a replay" in problems


def test_two_deliveries_at_once_must_run_once() -> None:
    assert load.check_answers([answer("concurrent", False), answer("concurrent", True)]) == []
    both = load.check_answers([answer("concurrent", True), answer("concurrent", True)])
    assert "t/k1: two deliveries at once, not exactly one ran" in both
    assert "t/k1: no answer says it ran the turn" in both


def test_after_a_timeout_the_run_may_have_been_the_abandoned_request() -> None:
    gave_up = Answer("t", "k1", "timed_out", None)
    assert load.check_answers([gave_up, answer("retry", True), answer("verify", True)]) == []
    assert load.check_answers([gave_up, answer("retry", False), answer("verify", True)]) == []


def test_replay_header_must_be_there_and_agree() -> None:
    missing = load.check_answers([answer("first", False, replayed_header=None)])
    assert missing == ["t/k1 (first, server 0): no Idempotent-Replayed header"]
    wrong = load.check_answers([answer("first", False, replayed_header=True)])
    assert wrong == ["t/k1 (first, server 0): Idempotent-Replayed True but body False"]


def test_a_conflict_must_be_refused_as_a_reused_key() -> None:
    accepted = answer("conflict", True, text="a different text")
    problems = load.check_answers([answer("first", False), accepted])
    assert problems == ["t/k1 (conflict, server 0): expected 409 TURN_ID_REUSED, got 200 None"]


def test_a_key_never_answered_fails() -> None:
    assert load.check_answers([Answer("t", "k1", "timed_out", None)]) == ["t/k1: never answered"]


def test_store_check() -> None:
    expected = {"a": ["k1", "k2", "k3"], "b": ["k1"]}
    assert load.check_store({"a": ["k1", "k2", "k3"], "b": ["k1"]}, expected) == []
    assert load.check_store({"a": ["k1", "k2", "k2", "k3"], "b": ["k1"]}, expected) == [
        "a: committed more than once: k2"
    ]
    assert load.check_store({"a": ["k1", "k3"], "b": ["k1", "x"]}, expected) == [
        "a: never committed: k2",
        "b: committed but never sent: x",
    ]
    assert load.check_store({"a": ["k2", "k1", "k3"], "b": ["k1"]}, expected) == [
        "a: committed out of order"
    ]
    assert load.check_store({"a": ["k1", "k2", "k3"], "b": ["k1"], "c": ["k1"]}, expected) == [
        "c: a thread nobody talked to has turns"
    ]


def test_provider_check() -> None:
    calls = [{"key": "ik-1", "item": "c0-i2"}, {"key": "ik-2", "item": "c0-i5"}]
    assert load.check_provider(calls, ["c0-i2", "c0-i5"]) == []
    twice = [*calls, {"key": "ik-1", "item": "c0-i2"}]
    assert load.check_provider(twice, ["c0-i2", "c0-i5"]) == [
        "provider key ik-1... called 2 times",
        "order c0-i2: 2 provider calls",
    ]
    assert load.check_provider(calls[:1], ["c0-i2", "c0-i5"]) == ["order c0-i5: 0 provider calls"]
    assert load.check_provider(calls, ["c0-i2"]) == ["order c0-i5: placed but never confirmed"]


def test_summary_leaves_the_replay_check_out() -> None:
    answers = [
        answer("first", False, seconds=0.010),
        answer("repeat", True, seconds=0.002),
        Answer("t", "k1", "timed_out", None, seconds=0.002),
        answer("verify", True, seconds=1.0),
    ]
    summary = load.summarize(answers, 2.0)
    assert summary["requests"] == 2
    assert summary["gave_up"] == 1
    assert summary["turns"] == 1
    assert summary["requests_per_s"] == 1.0
    assert summary["latency"]["all"] == {"count": 2, "p50_ms": 2.0, "p99_ms": 10.0}
    assert summary["latency"]["first"]["p50_ms"] == 10.0


# ---------------------------------------------------------------- the command, short


def run_short(tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "http_load.json"
    argv = ["--clients", "4", "--turns", "6", "--dir", str(tmp_path), "--out", str(out), *extra]
    code = load.main(argv)
    written: dict[str, Any] = json.loads(out.read_text())
    assert written["benchmark"] == "http_load"
    assert len(written["runs"]) == 1
    report: dict[str, Any] = written["runs"][0]
    problems = {
        (side, name): check["problems"]
        for side, cell in report["cells"].items()
        for name, check in cell["checks"].items()
        if not check["ok"]
    }
    assert problems == {}
    assert code == 0
    assert report["ok"] is True
    assert written["ok"] is True
    for cell in report["cells"].values():
        assert cell["turns"] == 4 * 6
        assert cell["committed_keys"] == 4 * 6
        assert cell["orders"] == 4 * 2
        assert cell["requests"] >= 4 * 6
    return report


def test_short_load_on_sqlite(tmp_path: Path) -> None:
    report = run_short(tmp_path, "--duplicates", "0.3", "--timeouts", "0.2")
    assert report["store"] == "sqlite"
    assert report["cells"]["http"]["servers"] == 1
    kinds = report["cells"]["http"]["by_kind"]
    assert kinds.get("concurrent", 0) + kinds.get("repeat", 0) > 0
    assert kinds.get("timed_out", 0) > 0


def test_short_load_on_two_servers_sharing_postgresql(tmp_path: Path) -> None:
    from tests.support.postgres import require_postgres

    dsn = require_postgres()
    report = run_short(tmp_path, "--store", dsn, "--duplicates", "0.3", "--timeouts", "0.2")
    assert report["store"] == "postgresql"
    assert report["cells"]["http"]["servers"] == 2
