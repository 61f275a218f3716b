"""receipts and reconcile: an uncertain write, resolved through the CLI, then the next turn."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from typer.testing import Result

from .conftest import Seeded
from .support import cli, cli_json, commit_turn

KEY = "payments.charge:o-9"


def _retry(seeded: Seeded) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        store = await seeded.open()
        try:
            result = await commit_turn(store, "t-unc", "turn-1", charge=("o-9", seeded.provider))
        finally:
            await store.close()
        assert isinstance(result.response, dict)
        return result.response

    return asyncio.run(go())


def test_receipts_lists_uncertain_oldest_first(seeded: Seeded) -> None:
    human = cli("receipts", "--store", seeded.store)
    assert human.exit_code == 0, human.stderr
    assert KEY in human.stdout and "payments.charge" in human.stdout
    data = cli_json("receipts", "--store", seeded.store)
    [row] = data["receipts"]
    assert row["thread_id"] == "t-unc" and row["turn_id"] == "turn-1"
    assert row["status"] == "uncertain" and row["idempotency_key"] == KEY
    every = cli_json("receipts", "--store", seeded.store, "--status", "all")
    assert [r["status"] for r in every["receipts"]] == ["completed", "uncertain"]


def test_reconcile_completed_round_trip(seeded: Seeded) -> None:
    calls = seeded.provider.calls[KEY]
    result = cli(
        "reconcile",
        "t-unc",
        KEY,
        "--store",
        seeded.store,
        "--completed",
        "--value",
        '{"charge_id": "ch_found"}',
        "--note",
        "seen in dashboard",
        "--actor",
        "ops",
        "--yes",
    )
    assert result.exit_code == 0, result.stderr
    assert "now completed" in result.stdout
    assert cli_json("receipts", "--store", seeded.store)["receipts"] == []
    history = cli_json("receipts", "--store", seeded.store, "--history")
    [record] = history["reconciliations"]
    assert record["outcome"] == "completed" and record["actor"] == "ops"
    assert record["value"] == {"charge_id": "ch_found"} and record["previous_status"] == "uncertain"
    assert "seen in dashboard" in cli("receipts", "--store", seeded.store, "--history").stdout
    response = _retry(seeded)
    assert response["charge"] == {"charge_id": "ch_found"}
    assert seeded.provider.calls[KEY] == calls  # replayed: the provider was not called


def test_reconcile_not_applied_retries_once(seeded: Seeded) -> None:
    calls = seeded.provider.calls[KEY]
    data = cli_json(
        "reconcile",
        "t-unc",
        KEY,
        "--store",
        seeded.store,
        "--not-applied",
        "--note",
        "no charge at the provider",
        "--actor",
        "ops",
        "--yes",
    )
    assert data["outcome"] == "not_applied" and data["receipt"]["status"] == "failed"
    response = _retry(seeded)
    assert response["charge"] == {"charge_id": f"ch_{calls + 1}"}
    assert seeded.provider.calls[KEY] == calls + 1
    _retry(seeded)  # a replay of the committed turn: no further call
    assert seeded.provider.calls[KEY] == calls + 1


def test_reconcile_errors(seeded: Seeded) -> None:
    base = ["reconcile", "t-unc", KEY, "--store", seeded.store, "--note", "n", "--actor", "a"]
    bad_json = cli(*base, "--completed", "--value", "{not json")
    assert bad_json.exit_code == 2 and "[INVALID_JSON]" in bad_json.stderr
    both = cli(*base, "--completed", "--not-applied")
    assert both.exit_code == 2 and "[INVALID_OUTCOME]" in both.stderr
    neither = cli(*base)
    assert neither.exit_code == 2 and "[INVALID_OUTCOME]" in neither.stderr
    no_audit = cli("reconcile", "t-unc", KEY, "--store", seeded.store, "--not-applied")
    assert no_audit.exit_code == 2 and "[AUDIT_REQUIRED]" in no_audit.stderr
    done = cli(
        "reconcile",
        "t-ok",
        "payments.charge:o-1",
        "--store",
        seeded.store,
        "--not-applied",
        "--note",
        "n",
        "--actor",
        "a",
        "--json",
    )
    assert done.exit_code == 2 and "RECEIPT_NOT_UNCERTAIN" in done.stdout, done.stdout
    missing = cli(
        "reconcile",
        "t-ok",
        "payments.charge:zzz",
        "--store",
        seeded.store,
        "--not-applied",
        "--note",
        "n",
        "--actor",
        "a",
    )
    assert missing.exit_code == 2 and "[RECEIPT_NOT_FOUND]" in missing.stderr
    assert cli_json("receipts", "--store", seeded.store)["receipts"][0]["status"] == "uncertain"


def _reconcile(seeded: Seeded, *extra: str, stdin: str | None = None) -> Result:
    args = ["reconcile", "t-unc", KEY, "--store", seeded.store, "--note", "n", "--actor", "ops"]
    return cli(*args, *extra, input=stdin)


def _status(seeded: Seeded) -> list[str]:
    return [r["status"] for r in cli_json("receipts", "--store", seeded.store)["receipts"]]


def test_completed_requires_a_value_and_null_must_be_explicit(seeded: Seeded) -> None:
    missing = _reconcile(seeded, "--completed", "--yes")
    assert missing.exit_code == 2 and "[VALUE_REQUIRED]" in missing.stderr
    assert "--value null" in missing.stderr
    assert _status(seeded) == ["uncertain"]
    explicit = _reconcile(seeded, "--completed", "--value", "null", "--yes", "--json")
    assert explicit.exit_code == 0, explicit.stderr
    assert json.loads(explicit.stdout)["receipt"]["status"] == "completed"
    [record] = cli_json("receipts", "--store", seeded.store, "--history")["reconciliations"]
    assert record["value"] is None


def test_reconcile_shows_what_it_records_and_asks_first(seeded: Seeded) -> None:
    value = '{"charge_id": "ch_found", "amount": 990}'
    declined = _reconcile(seeded, "--completed", "--value", value, stdin="n\n")
    assert declined.exit_code == 1, (declined.stdout, declined.stderr)
    for shown in ("t-unc", KEY, "completed", '"charge_id": "ch_found"', "ops", "[y/N]"):
        assert shown in declined.stderr, declined.stderr
    assert "[NOT_CONFIRMED]" in declined.stderr
    assert _status(seeded) == ["uncertain"]
    no_answer = _reconcile(seeded, "--completed", "--value", value, "--json")  # stdin at EOF
    assert no_answer.exit_code == 1
    assert json.loads(no_answer.stdout)["error"]["code"] == "NOT_CONFIRMED"
    assert _status(seeded) == ["uncertain"]
    accepted = _reconcile(seeded, "--completed", "--value", value, "--json", stdin="y\n")
    assert accepted.exit_code == 0, accepted.stderr
    document = accepted.stdout[accepted.stdout.index("{") :]  # the runner echoes the answer
    assert json.loads(document)["receipt"]["value"] == json.loads(value)
    assert _status(seeded) == []


def test_a_wrong_value_is_corrected_with_an_audit_trail(seeded: Seeded) -> None:
    first = _reconcile(seeded, "--completed", "--value", '{"charge_id": "ch_typo"}', "--yes")
    assert first.exit_code == 0, first.stderr
    declined = _reconcile(
        seeded, "--completed", "--value", '{"charge_id": "ch_found"}', "--correct", stdin="n\n"
    )
    assert declined.exit_code == 1 and "corrects the reconciliation" in declined.stderr
    assert '"charge_id": "ch_typo"' in declined.stderr
    fixed = _reconcile(
        seeded, "--completed", "--value", '{"charge_id": "ch_found"}', "--correct", stdin="y\n"
    )
    assert fixed.exit_code == 0, fixed.stderr
    [old, new] = cli_json("receipts", "--store", seeded.store, "--history")["reconciliations"]
    assert new["supersedes"] == old["id"] and new["value"] == {"charge_id": "ch_found"}
    response = _retry(seeded)
    assert response["charge"] == {"charge_id": "ch_found"}


def test_correcting_an_unreconciled_receipt_is_refused(seeded: Seeded) -> None:
    result = _reconcile(seeded, "--not-applied", "--correct", "--yes")
    assert result.exit_code == 2 and "[RECEIPT_NOT_RECONCILED]" in result.stderr
    assert _status(seeded) == ["uncertain"]


def test_receipts_says_when_there_are_none(seeded: Seeded) -> None:
    """An unknown --thread is THREAD_NOT_FOUND (exit 2), as for events and turns; a known
    thread or store without such receipts says so (exit 0) instead of printing nothing."""
    for args in ([], ["--history"], ["--status", "all"]):
        unknown = cli("receipts", "--store", seeded.store, "--thread", "nope", *args)
        assert unknown.exit_code == 2 and "[THREAD_NOT_FOUND]" in unknown.stderr, args
        assert unknown.stdout == ""
    none = cli("receipts", "--store", seeded.store, "--thread", "t-ok")
    assert none.exit_code == 0 and none.stdout.strip() == "no uncertain receipts on thread t-ok"
    assert cli_json("receipts", "--store", seeded.store, "--thread", "t-ok")["receipts"] == []
    history = cli("receipts", "--store", seeded.store, "--history")
    assert history.exit_code == 0 and history.stdout.strip() == "no reconciliations"
    failed = cli("receipts", "--store", seeded.store, "--status", "failed")
    assert failed.exit_code == 0 and failed.stdout.strip() == "no failed receipts"
