"""thread diagnose: a held lease, a pending confirmation, an uncertain write, a free thread."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from .conftest import Seeded
from .support import cli, cli_json

_HOLDER = textwrap.dedent(
    """
    import asyncio, sys

    async def main():
        if sys.argv[1] == "sqlite":
            from intention_kernel.durability.sqlite import SQLiteDurability
            store = await SQLiteDurability.open(sys.argv[2])
        else:
            from intention_kernel.durability.postgres import PostgresDurability
            store = await PostgresDurability.open(sys.argv[2], schema=sys.argv[3], max_size=2)
        async with store.turn("t-ok", "turn-held"):
            print("held", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await store.close()

    asyncio.run(main())
    """
)


def test_free_thread(seeded: Seeded) -> None:
    result = cli("thread", "diagnose", "t-ok", "--store", seeded.store)
    assert result.exit_code == 0, result.stderr
    assert "not blocked" in result.stdout and "nothing blocks the next turn" in result.stdout
    data = cli_json("thread", "diagnose", "t-ok", "--store", seeded.store)
    assert data["findings"][0]["kind"] == "undelivered_events"
    assert not data["blocked"] and data["lease"]["held"] is False


def test_uncertain_receipt_holds_its_key_not_the_thread(seeded: Seeded) -> None:
    result = cli("thread", "diagnose", "t-unc", "--store", seeded.store)
    assert result.exit_code == 4, result.stdout  # only writes are held
    first = result.stdout.splitlines()[0]
    assert "BLOCKED" not in result.stdout and first.startswith("thread t-unc: not blocked")
    assert "1 write(s) held until reconciled" in first and "payments.charge:o-9" in first
    assert "may or may not have happened" in result.stdout
    assert "intention-kernel reconcile t-unc payments.charge:o-9 --completed" in result.stdout
    data = cli_json("thread", "diagnose", "t-unc", "--store", seeded.store, code=4)
    [finding] = data["findings"]
    assert finding["kind"] == "uncertain_receipt" and not finding["blocking"]
    assert finding["key"] == "payments.charge:o-9"
    assert data["blocked"] is False and data["blocked_keys"] == ["payments.charge:o-9"]


def test_pending_confirmation(seeded: Seeded) -> None:
    data = cli_json("thread", "diagnose", "t-wait", "--store", seeded.store, code=1)
    [pending] = [f for f in data["findings"] if f["kind"] == "pending_interaction"]
    assert "Refund 42 EUR?" in pending["detail"] and "agenda item ag-1" in pending["detail"]
    assert not data["blocked"]


def test_incompatible_checkpoint_with_agent(seeded: Seeded) -> None:
    data = cli_json(
        "thread",
        "diagnose",
        "t-ok",
        "--store",
        seeded.store,
        "--agent",
        "tests.cli.agents:current",
        code=1,
    )
    [finding] = [f for f in data["findings"] if f["kind"] == "incompatible_checkpoint"]
    assert "compatible_with=['agent@1']" in finding["resolve"]


def _target(seeded: Seeded) -> list[str]:
    if seeded.backend == "sqlite":
        return [str(seeded.path)]
    assert seeded.dsn is not None and seeded.schema is not None
    return [seeded.dsn, seeded.schema]


def test_lease_held_by_another_process(seeded: Seeded) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, seeded.backend, *_target(seeded)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = cli("thread", "diagnose", "t-ok", "--store", seeded.store)
        assert result.exit_code == 1, result.stdout
        if seeded.backend == "sqlite":
            assert f"held by pid {holder.pid}" in result.stdout
            assert "released when the holder finishes or exits" in result.stdout
            assert f"kill {holder.pid}" in result.stdout
        else:  # the lease row names the owner (host/pid/token) and its expiry
            assert f"/{holder.pid}/" in result.stdout and "expires at" in result.stdout
        data = cli_json("thread", "diagnose", "t-ok", "--store", seeded.store, code=1)
        assert data["lease"]["held"] and data["lease"]["epoch"] >= 1
        assert data["findings"][0]["kind"] == "lease_held"
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
        if holder.stdout is not None:
            holder.stdout.close()
    after = cli_json("thread", "diagnose", "t-ok", "--store", seeded.store)
    assert after["lease"]["held"] is False
