"""``inbox list|stats|retry|cancel`` and ``thread diagnose`` on submitted turn requests, on a real
SQLite file: states, ages, claims and errors listed; retries and cancels kept as audit records;
refusals typed (``REQUEST_NOT_FOUND``, ``REQUEST_STATE_CONFLICT``, exit 2); the head request
that holds a thread back named with the command that resolves it."""

from __future__ import annotations

import asyncio
import json
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from intention_kernel.contracts.inbox import InboxRequest
from intention_kernel.durability.sqlite import SQLiteDurability

from .support import cli, cli_json


async def _submit(store: SQLiteDurability, thread_id: str, turn_id: str, **options: Any) -> None:
    await store.inbox.submit(
        thread_id, turn_id, text=f"question {turn_id}", fingerprint=f"fp-{turn_id}", **options
    )


async def _claim(store: SQLiteDurability, worker: str, ttl: float = 60.0) -> InboxRequest:
    claimed = await store.inbox.claim(worker, ttl=ttl)
    assert claimed is not None
    return claimed


def _build(path: Path, steps: Any) -> None:
    async def main() -> None:
        store = await SQLiteDurability.open(path, migrate=True)
        try:
            await steps(store)
        finally:
            await store.close()

    asyncio.run(main())


@pytest.fixture
def backlog(tmp_path: Path) -> str:
    """t-run/u1 running (live claim of w-1), t-b/u1 dead, t-b/u2 pending, t-later/u1 pending
    not before an hour from now."""
    path = tmp_path / "inbox.db"

    async def steps(store: SQLiteDurability) -> None:
        await _submit(store, "t-run", "u1")
        assert (await _claim(store, "w-1")).key == ("t-run", "u1")
        await _submit(store, "t-b", "u1")
        assert (await _claim(store, "w-2")).key == ("t-b", "u1")
        await store.inbox.release(
            "w-2", "t-b", "u1", retry_in=None, error_code="MODEL_REFUSED", error="no answer"
        )
        await _submit(store, "t-b", "u2")
        await _submit(store, "t-later", "u1", not_before=datetime.now(UTC) + timedelta(hours=1))

    _build(path, steps)
    return str(path)


def test_list_shows_states_ages_claims_and_errors_store_wide_or_per_thread(backlog: str) -> None:
    data = cli_json("inbox", "list", "--store", backlog)
    rows = data["requests"]
    assert [(r["thread_id"], r["turn_id"], r["state"]) for r in rows] == [
        ("t-run", "u1", "running"),
        ("t-b", "u1", "dead"),
        ("t-b", "u2", "pending"),
        ("t-later", "u1", "pending"),
    ]
    assert data["next_after"] is None
    running, dead, _, later = rows
    assert running["claimed_by"] == "w-1" and running["claim_expired"] is False
    assert running["attempts"] == 1 and running["age"].endswith("s")
    assert (dead["error_code"], dead["error"], dead["attempts"]) == (
        "MODEL_REFUSED",
        "no answer",
        1,
    )
    assert datetime.fromisoformat(later["not_before"]) > datetime.now(UTC) + timedelta(minutes=59)
    assert "text" not in running and "host_context" not in running  # never the payload

    only_dead = cli_json("inbox", "list", "--store", backlog, "--state", "dead")["requests"]
    assert [(r["thread_id"], r["turn_id"]) for r in only_dead] == [("t-b", "u1")]
    thread = cli_json("inbox", "list", "--store", backlog, "--thread", "t-b")["requests"]
    assert [r["turn_id"] for r in thread] == ["u1", "u2"]
    page = cli_json("inbox", "list", "--store", backlog, "--limit", "2")
    assert len(page["requests"]) == 2 and page["next_after"] == rows[1]["position"]
    rest = cli_json("inbox", "list", "--store", backlog, "--after", str(page["next_after"]))
    assert [r["turn_id"] for r in rest["requests"]] == ["u2", "u1"]

    human = cli("inbox", "list", "--store", backlog)
    assert human.exit_code == 0, human.stderr
    assert "w-1" in human.stdout and "MODEL_REFUSED" in human.stdout
    assert "in 59m" in human.stdout and "due" in human.stdout
    none = cli("inbox", "list", "--store", backlog, "--state", "running", "--thread", "t-b")
    assert none.exit_code == 0 and "no running requests on thread t-b" in none.stdout


def test_stats_counts_the_backlog(backlog: str) -> None:
    data = cli_json("inbox", "stats", "--store", backlog)
    assert (data["pending"], data["running"], data["dead"]) == (2, 1, 1)
    assert data["oldest_pending_at"] is not None and 0 <= data["oldest_pending_age"] < 60
    human = cli("inbox", "stats", "--store", backlog)
    assert human.exit_code == 0 and "oldest pending" in human.stdout and "ago" in human.stdout


def test_retry_and_cancel_are_audit_records_and_wrong_states_are_refused(backlog: str) -> None:
    audit = ["--actor", "ops@example.com", "--note", "provider is back"]
    retried = cli_json(
        "inbox", "retry", "--thread", "t-b", "--turn", "u1", *audit, "--store", backlog
    )
    request = retried["request"]
    assert retried["action"] == "retry" and request["state"] == "pending"
    [record] = request["operator_log"]
    assert record["action"] == "retry" and record["previous_state"] == "dead"
    assert (record["actor"], record["note"]) == ("ops@example.com", "provider is back")

    human = cli(
        "inbox", "cancel", "--thread", "t-later", "--turn", "u1", *audit, "--store", backlog
    )
    assert human.exit_code == 0, human.stderr
    assert "cancel of u1 on t-later: was pending, now dead" in human.stdout
    stored = cli_json("inbox", "list", "--store", backlog, "--thread", "t-later")["requests"]
    assert stored[0]["state"] == "dead" and stored[0]["operator_log"][0]["action"] == "cancel"

    refused = cli(
        "inbox", "cancel", "--thread", "t-later", "--turn", "u1", *audit, "--store", backlog
    )
    assert refused.exit_code == 2
    assert "[REQUEST_STATE_CONFLICT] only a pending request can be given a cancel" in refused.stderr
    running = cli(
        "inbox", "retry", "--thread", "t-run", "--turn", "u1", *audit, "--store", backlog, "--json"
    )
    assert running.exit_code == 2
    error = json.loads(running.stdout)["error"]
    assert error["code"] == "REQUEST_STATE_CONFLICT" and error["context"]["state"] == "running"
    missing = cli("inbox", "retry", "--thread", "t-b", "--turn", "nope", *audit, "--store", backlog)
    assert missing.exit_code == 2 and "[REQUEST_NOT_FOUND] no such turn request" in missing.stderr
    unaudited = cli("inbox", "retry", "--thread", "t-b", "--turn", "u1", "--store", backlog)
    assert unaudited.exit_code == 2 and "[AUDIT_REQUIRED]" in unaudited.stderr
    assert "Traceback" not in refused.stderr + missing.stderr + unaudited.stderr


def test_diagnose_names_a_running_request_whose_claim_expired(tmp_path: Path) -> None:
    path = tmp_path / "expired.db"

    async def steps(store: SQLiteDurability) -> None:
        await _submit(store, "t-1", "u1")
        await _submit(store, "t-1", "u2")
        await _claim(store, "w-dead", ttl=0.01)
        await asyncio.sleep(0.05)

    _build(path, steps)
    # The thread has no committed turn yet: it is known by its requests.
    data = cli_json("thread", "diagnose", "t-1", "--store", str(path), code=1)
    [finding] = [f for f in data["findings"] if f["kind"] == "request_claim_expired"]
    assert data["blocked"] and finding["blocking"]
    assert "claimed by w-dead, whose claim expired" in finding["detail"]
    assert "1 later request(s) wait behind it" in finding["detail"]
    assert finding["resolve"].endswith(
        f"intention-kernel worker --agent MODULE:ATTRIBUTE --store {path}"
    )
    head = data["inbox"]["head"]
    assert (head["turn_id"], head["state"], head["claim_expired"]) == ("u1", "running", True)
    assert (data["inbox"]["pending"], data["inbox"]["running"]) == (1, 1)
    human = cli("thread", "diagnose", "t-1", "--store", str(path))
    assert human.exit_code == 1 and "BLOCKED" in human.stdout
    assert "inbox: 1 pending, 1 running, 0 dead; next: turn u1 (running" in human.stdout
    assert "claimed by w-dead" in human.stdout
    unknown = cli("thread", "diagnose", "t-none", "--store", str(path))
    assert unknown.exit_code == 2 and "THREAD_NOT_FOUND" in unknown.stderr


def test_diagnose_names_a_retrying_head_and_its_retry_command_runs_as_printed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "waiting.db"

    async def steps(store: SQLiteDurability) -> None:
        await _submit(store, "t-1", "u1")
        await _submit(store, "t-1", "u2")
        await _claim(store, "w-1")
        await store.inbox.release(
            "w-1", "t-1", "u1", retry_in=3600, error_code="MODEL_UNAVAILABLE", error="busy"
        )

    _build(path, steps)
    data = cli_json("thread", "diagnose", "t-1", "--store", str(path), code=1)
    [finding] = [f for f in data["findings"] if f["kind"] == "request_waiting"]
    assert finding["blocking"]
    assert "failed 1 time(s) [MODEL_UNAVAILABLE] busy; it is retried in 59m" in finding["detail"]
    retry = (
        "intention-kernel inbox retry --thread t-1 --turn u1 --actor NAME --note TEXT"
        f" --store {path}"
    )
    assert (
        retry in finding["resolve"]
        and "intention-kernel inbox cancel --thread t-1" in finding["resolve"]
    )

    # The resolve runs as printed once NAME and TEXT are given.
    command = retry.replace("NAME", "ops").replace("TEXT", "'provider back'")
    ran = cli(*shlex.split(command)[1:])
    assert ran.exit_code == 0, ran.stderr
    # Due now, its attempts counted from 0 again: nothing holds the thread back (exit 0).
    after = cli_json("thread", "diagnose", "t-1", "--store", str(path))
    assert not [f for f in after["findings"] if f["blocking"]]
    assert after["inbox"]["head"]["attempts"] == 0, after["inbox"]


def test_diagnose_names_a_scheduled_head_and_a_skipped_dead_request(tmp_path: Path) -> None:
    path = tmp_path / "dead.db"

    async def steps(store: SQLiteDurability) -> None:
        await _submit(store, "t-1", "u1")
        await _claim(store, "w-1")
        await store.inbox.release(
            "w-1", "t-1", "u1", retry_in=None, error_code="MODEL_REFUSED", error="refused"
        )
        await _submit(store, "t-1", "u2", not_before=datetime.now(UTC) + timedelta(hours=2))
        await _submit(store, "t-2", "u1", not_before=datetime.now(UTC) + timedelta(hours=2))

    _build(path, steps)
    data = cli_json("thread", "diagnose", "t-1", "--store", str(path))  # nothing blocks: exit 0
    kinds = {f["kind"]: f for f in data["findings"]}
    scheduled = kinds["request_waiting"]
    assert not scheduled["blocking"] and "was submitted to run not before" in scheduled["detail"]
    assert "intention-kernel inbox retry --thread t-1 --turn u2" in scheduled["resolve"]
    dead = kinds["dead_request"]
    assert not dead["blocking"]
    assert "u1 (request 1) is dead after 1 attempt(s) [MODEL_REFUSED] refused" in dead["detail"]
    assert (
        f"inbox retry --thread t-1 --turn u1 --actor NAME --note TEXT --store {path}"
        in dead["resolve"]
    )
    assert data["inbox"]["dead"] == 1 and data["inbox"]["dead_before"][0]["turn_id"] == "u1"


def test_a_store_without_requests_reports_an_empty_inbox(sqlite_seeded: Any) -> None:
    data = cli_json("thread", "diagnose", "t-ok", "--store", sqlite_seeded.store)
    assert data["inbox"] == {"pending": 0, "running": 0, "dead": 0, "head": None, "dead_before": []}
    assert cli_json("inbox", "list", "--store", sqlite_seeded.store) == {
        "requests": [],
        "next_after": None,
    }
    human = cli("inbox", "list", "--store", sqlite_seeded.store, "--state", "dead")
    assert human.exit_code == 0 and "no dead requests" in human.stdout
