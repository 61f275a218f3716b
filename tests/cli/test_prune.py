"""prune keeps every live obligation, over random store contents (hypothesis)."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intention_kernel.durability._documents import PRUNED_TURN
from intention_kernel.durability.sqlite import SQLiteDurability

from .conftest import Seeded
from .support import Provider, cli, cli_json, commit_turn, sql, uncertain_turn

OLD = (datetime.now(UTC) - timedelta(days=90)).isoformat()


def _micros(iso: str) -> int:
    """Delivery time as the SQLite outbox stores it next to ``delivered_at``."""
    return (datetime.fromisoformat(iso) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
        microseconds=1
    )


@dataclass(frozen=True)
class TurnSpec:
    old: bool
    uncertain_first: bool
    interaction: bool
    events: tuple[tuple[bool, bool, bool], ...]  # delivered, delivered long ago, dead


turn_specs = st.builds(
    TurnSpec,
    old=st.booleans(),
    uncertain_first=st.booleans(),
    interaction=st.booleans(),
    events=st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=2).map(tuple),
)
stores = st.lists(st.lists(turn_specs, min_size=1, max_size=4), min_size=1, max_size=3)


async def _build(path: Path, threads: list[list[TurnSpec]]) -> None:
    store = await SQLiteDurability.open(path)
    provider = Provider()
    try:
        for t, turns in enumerate(threads):
            for n, spec in enumerate(turns):
                thread, turn = f"t{t}", f"turn-{n}"
                if spec.uncertain_first:
                    await uncertain_turn(store, thread, f"lost-{n}", f"k{n}", provider)
                await commit_turn(
                    store, thread, turn, interaction=spec.interaction, events=len(spec.events)
                )
                if spec.old:
                    sql(
                        path,
                        "UPDATE ik_turns SET committed_at = ? WHERE thread_id = ? AND turn_id = ?",
                        [OLD, thread, turn],
                    )
                for s, (delivered, long_ago, dead) in enumerate(spec.events):
                    when = OLD if long_ago else datetime.now(UTC).isoformat()
                    sql(
                        path,
                        "UPDATE ik_outbox SET delivered_at = ?, delivered_us = ?, dead = ?"
                        " WHERE thread_id = ? AND turn_id = ? AND sequence = ?",
                        [
                            when if delivered else None,
                            _micros(when) if delivered else None,
                            int(dead),
                            thread,
                            turn,
                            s,
                        ],
                    )
    finally:
        await store.close()


def _snapshot(path: Path) -> dict[str, list[tuple[object, ...]]]:
    return {
        "turns": sql(
            path,
            "SELECT thread_id, turn_id, committed_at FROM ik_turns WHERE result != ? ORDER BY 1, 2",
            [PRUNED_TURN],
        ),
        "tombstones": sql(path, "SELECT thread_id, turn_id FROM ik_turns ORDER BY 1, 2"),
        "heads": sql(path, "SELECT thread_id, revision, turn_id FROM ik_heads ORDER BY 1"),
        "receipts": sql(path, "SELECT * FROM ik_receipts ORDER BY 1, 2"),
        "outbox": sql(path, "SELECT position, delivered_at, dead FROM ik_outbox ORDER BY 1"),
    }


async def _prune(path: Path, dry_run: bool) -> tuple[list[tuple[str, str]], list[int]]:
    store = await SQLiteDurability.open(path)
    try:
        cutoff = datetime.now(UTC) - timedelta(days=30)
        report = await store.prune_records(older_than=cutoff, dry_run=dry_run)
        return sorted(report.turns), sorted(report.events)
    finally:
        await store.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(threads=stores)
def test_prune_never_drops_live_obligations(threads: list[list[TurnSpec]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.db"
        asyncio.run(_build(path, threads))
        before = _snapshot(path)
        planned = asyncio.run(_prune(path, dry_run=True))
        assert _snapshot(path) == before  # a dry run changes nothing
        done = asyncio.run(_prune(path, dry_run=False))
        assert done == planned
        after = _snapshot(path)

        assert after["heads"] == before["heads"]  # latest checkpoints (interaction, agenda)
        assert after["receipts"] == before["receipts"]  # uncertain receipts untouched
        heads = {(thread, turn) for thread, _, turn in before["heads"]}
        kept_turns = {(t, u) for t, u, _ in after["turns"]}
        assert heads <= kept_turns
        expected_gone = {(t, u) for t, u, at in before["turns"] if at == OLD} - heads
        assert set(done[0]) == expected_gone
        assert after["tombstones"] == before["tombstones"]  # pruned turn ids still never rerun
        assert kept_turns == {(t, u) for t, u, _ in before["turns"]} - expected_gone
        kept_events = {p for p, _, _ in after["outbox"]}
        for position, delivered, dead in before["outbox"]:
            if delivered is None or dead:  # undelivered or dead: a live obligation
                assert position in kept_events
            elif delivered == OLD:
                assert position not in kept_events
            else:
                assert position in kept_events

        async def next_turns() -> None:  # every thread continues from its kept checkpoint
            store = await SQLiteDurability.open(path)
            try:
                for t in range(len(threads)):
                    await commit_turn(store, f"t{t}", "after-prune")
            finally:
                await store.close()

        asyncio.run(next_turns())


def test_prune_command(seeded: Seeded) -> None:
    old = datetime.now(UTC) - timedelta(days=90)
    seeded.execute(
        "UPDATE ik_turns SET committed_at = ?", "UPDATE {s}.turns SET committed_at = $1", old
    )
    events = 0
    if seeded.backend == "sqlite":  # the PostgreSQL outbox records no deliveries yet
        seeded.execute(
            "UPDATE ik_outbox SET delivered_at = ?, delivered_us = ? WHERE turn_id = 'turn-1'",
            "",
            old,
            _micros(old.isoformat()),
        )
        events = 2
    dry = cli("prune", "--older-than", "30d", "--store", seeded.store, "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert f"would remove 1 turn record(s) and {events} delivered event(s)" in dry.stdout
    assert "t-ok/turn-1" in dry.stdout and "kept 2 old turn(s)" in dry.stdout
    data = cli_json("prune", "--older-than", "30d", "--store", seeded.store)
    assert data["turns"] == [["t-ok", "turn-1"]] and len(data["events"]) == events
    assert cli_json("receipts", "--store", seeded.store)["receipts"][0]["thread_id"] == "t-unc"
    assert cli_json("thread", "show", "t-wait", "--store", seeded.store)["checkpoint"][
        "interaction"
    ]
    assert data["dry_run"] is False
    assert cli_json("status", "--store", seeded.store)["turns"] == 2
    bad = cli("prune", "--older-than", "soon", "--store", seeded.store)
    assert bad.exit_code == 2 and "[INVALID_DURATION]" in bad.stderr


async def _pg_case(dsn: str, threads: list[list[TurnSpec]]) -> None:
    import asyncpg

    from intention_kernel.durability.postgres import PostgresDurability
    from tests.support.postgres import drop_schema, scratch_schema

    schema = scratch_schema("ik_prune")
    s = f'"{schema}"'
    store = await PostgresDurability.open(dsn, schema=schema, setup=True, max_size=2)
    conn = await asyncpg.connect(dsn)
    try:
        provider = Provider()
        for t, turns in enumerate(threads):
            for n, spec in enumerate(turns):
                if spec.uncertain_first:
                    await uncertain_turn(store, f"t{t}", f"lost-{n}", f"k{n}", provider)
                await commit_turn(store, f"t{t}", f"turn-{n}", interaction=spec.interaction)
                if spec.old:
                    await conn.execute(
                        f"UPDATE {s}.turns SET committed_at = now() - interval '90 days'"
                        " WHERE thread_id = $1 AND turn_id = $2",
                        f"t{t}",
                        f"turn-{n}",
                    )
        turns_sql = (
            "SELECT thread_id, turn_id, committed_at < now() - interval '30 days' AS old"
            f" FROM {s}.turns WHERE result <> '{PRUNED_TURN}'"
        )
        before = {(r[0], r[1]): r[2] for r in await conn.fetch(turns_sql)}
        heads = {tuple(r) for r in await conn.fetch(f"SELECT thread_id, turn_id FROM {s}.heads")}
        receipts = await conn.fetch(f"SELECT * FROM {s}.receipts ORDER BY 1, 2")
        cutoff = datetime.now(UTC) - timedelta(days=30)
        planned = await store.prune_records(older_than=cutoff, dry_run=True)
        report = await store.prune_records(older_than=cutoff)
        assert sorted(planned.turns) == sorted(report.turns)
        after = {(r[0], r[1]) for r in await conn.fetch(turns_sql)}
        expected_gone = {key for key, old in before.items() if old} - heads
        assert set(report.turns) == expected_gone
        assert after == set(before) - expected_gone and heads <= after
        assert await conn.fetch(f"SELECT * FROM {s}.receipts ORDER BY 1, 2") == receipts
        for t in range(len(threads)):
            await commit_turn(store, f"t{t}", "after-prune")
    finally:
        await conn.close()
        await store.close()
        await drop_schema(dsn, schema)


@pytest.fixture(scope="module")
def pg_dsn() -> str:
    from tests.support.postgres import require_postgres

    return require_postgres()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(threads=stores)
def test_prune_keeps_live_obligations_on_postgres(
    pg_dsn: str, threads: list[list[TurnSpec]]
) -> None:
    asyncio.run(_pg_case(pg_dsn, threads))
