"""A prepared receipt whose turn was interrupted (its completed write was lost) is shown to the
operator as uncertain work: listed, counted, diagnosed with the reconcile command, reconciled."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from .conftest import Seeded
from .support import cli, cli_json, commit_turn, interrupted_turn

KEY = "payments.charge:o-5"

_MID_EFFECT = textwrap.dedent(
    """
    import asyncio, sys
    from intention_kernel.contracts import EffectIdentity

    async def main():
        if sys.argv[1] == "sqlite":
            from intention_kernel.durability.sqlite import SQLiteDurability
            store = await SQLiteDurability.open(sys.argv[2])
        else:
            from intention_kernel.durability.postgres import PostgresDurability
            store = await PostgresDurability.open(sys.argv[2], schema=sys.argv[3], max_size=2)

        async def charge(authority):
            print("in effect", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            return {"charge_id": "ch_run"}

        async with store.turn("t-run", "turn-1") as scope:
            await scope.run_effect(EffectIdentity("payments.charge:o-7", "payments.charge"), charge)
        await store.close()

    asyncio.run(main())
    """
)


def _interrupt(seeded: Seeded) -> None:
    async def go() -> None:
        store = await seeded.open()
        try:
            await interrupted_turn(store, "t-int", "turn-1", "o-5", seeded.provider)
        finally:
            await store.close()

    asyncio.run(go())


def test_receipts_lists_an_interrupted_prepared_receipt_as_uncertain(seeded: Seeded) -> None:
    _interrupt(seeded)
    data = cli_json("receipts", "--store", seeded.store)
    rows = {r["thread_id"]: r for r in data["receipts"]}
    assert set(rows) == {"t-unc", "t-int"}
    assert rows["t-int"]["status"] == "prepared" and rows["t-int"]["interrupted"] is True
    assert rows["t-int"]["idempotency_key"] == KEY and rows["t-int"]["turn_id"] == "turn-1"
    assert rows["t-unc"]["status"] == "uncertain" and rows["t-unc"]["interrupted"] is False
    human = cli("receipts", "--store", seeded.store)
    assert human.exit_code == 0, human.stderr
    assert "prepared (interrupted)" in human.stdout and KEY in human.stdout
    prepared = cli_json("receipts", "--store", seeded.store, "--status", "prepared")
    assert [(r["idempotency_key"], r["interrupted"]) for r in prepared["receipts"]] == [(KEY, True)]
    every = cli("receipts", "--store", seeded.store, "--status", "all", "--thread", "t-int")
    assert "prepared (interrupted)" in every.stdout
    shown = cli_json("thread", "show", "t-int", "--store", seeded.store)
    assert [(r["status"], r["interrupted"]) for r in shown["receipts"]] == [("prepared", True)]
    assert (
        "[prepared (interrupted)]" in cli("thread", "show", "t-int", "--store", seeded.store).stdout
    )


def test_status_and_threads_count_an_interrupted_prepared_receipt(seeded: Seeded) -> None:
    _interrupt(seeded)
    assert cli_json("status", "--store", seeded.store)["uncertain_receipts"] == 2
    assert "uncertain receipts 2" in cli("status", "--store", seeded.store).stdout
    only = cli_json("threads", "--store", seeded.store, "--uncertain")
    counts = {t["thread_id"]: t["uncertain_receipts"] for t in only["threads"]}
    assert counts == {"t-int": 1, "t-unc": 1}


def test_diagnose_names_the_reconcile_command_for_an_interrupted_write(seeded: Seeded) -> None:
    _interrupt(seeded)
    result = cli("thread", "diagnose", "t-int", "--store", seeded.store)
    assert result.exit_code == 4, result.stdout  # the write is held, not the thread
    assert "not blocked" in result.stdout and "interrupted" in result.stdout
    assert f"intention-kernel reconcile t-int {KEY} --completed" in result.stdout
    data = cli_json("thread", "diagnose", "t-int", "--store", seeded.store, code=4)
    [finding] = data["findings"]
    assert finding["kind"] == "prepared_receipt" and not finding["blocking"]
    assert finding["key"] == KEY and data["blocked_keys"] == [KEY]
    assert "may or may not have happened" in finding["detail"]
    assert f"reconcile t-int {KEY} --completed" in finding["resolve"]


def test_reconcile_an_interrupted_prepared_receipt(seeded: Seeded) -> None:
    _interrupt(seeded)
    calls = seeded.provider.calls[KEY]
    data = cli_json(
        "reconcile",
        "t-int",
        KEY,
        "--store",
        seeded.store,
        "--completed",
        "--value",
        '{"charge_id": "ch_seen"}',
        "--note",
        "charge found at the provider",
        "--actor",
        "ops",
        "--yes",
    )
    assert data["receipt"]["status"] == "completed"
    assert data["receipt"]["value"] == {"charge_id": "ch_seen"}
    [record] = cli_json("receipts", "--store", seeded.store, "--history", "--thread", "t-int")[
        "reconciliations"
    ]
    assert record["previous_status"] == "prepared" and record["outcome"] == "completed"
    assert [r["thread_id"] for r in cli_json("receipts", "--store", seeded.store)["receipts"]] == [
        "t-unc"
    ]
    assert cli_json("status", "--store", seeded.store)["uncertain_receipts"] == 1

    async def retry() -> object:
        store = await seeded.open()
        try:
            result = await commit_turn(store, "t-int", "turn-1", charge=("o-5", seeded.provider))
        finally:
            await store.close()
        assert isinstance(result.response, dict)
        return result.response["charge"]

    assert asyncio.run(retry()) == {"charge_id": "ch_seen"}
    assert seeded.provider.calls[KEY] == calls  # replayed: the provider was not called again


def test_a_running_turns_prepared_receipt_is_not_interrupted(seeded: Seeded) -> None:
    root = Path(__file__).resolve().parents[2]
    target = [str(seeded.path)] if seeded.backend == "sqlite" else [seeded.dsn, seeded.schema]
    holder = subprocess.Popen(
        [sys.executable, "-c", _MID_EFFECT, seeded.backend, *[str(t) for t in target]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(root)},
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "in effect"
        listed = cli_json("receipts", "--store", seeded.store)["receipts"]
        assert [r["thread_id"] for r in listed] == ["t-unc"]
        [row] = cli_json("receipts", "--store", seeded.store, "--status", "prepared")["receipts"]
        assert (row["thread_id"], row["interrupted"]) == ("t-run", False)
        human = cli("receipts", "--store", seeded.store, "--status", "prepared")
        assert "prepared" in human.stdout and "interrupted" not in human.stdout
        assert cli_json("status", "--store", seeded.store)["uncertain_receipts"] == 1
        data = cli_json("thread", "diagnose", "t-run", "--store", seeded.store, code=1)
        assert [f["kind"] for f in data["findings"]] == ["lease_held"]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(timeout=20) == 0
        if holder.stdout is not None:
            holder.stdout.close()
    [row] = cli_json("receipts", "--store", seeded.store, "--status", "all", "--thread", "t-run")[
        "receipts"
    ]
    assert (row["status"], row["interrupted"]) == ("completed", False)
