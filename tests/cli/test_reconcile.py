"""receipts and reconcile: an uncertain write, resolved through the CLI, then the next turn."""

from __future__ import annotations

import asyncio
from typing import Any

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
