"""The SQLite adapter as an ``OutboxSource``: the shared suite, plus what is SQLite's own
(upgrade from schema 1, claim cost with a long delivered history, the relay command)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import pytest

from intention_kernel.cli._app import run
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.durability.sqlite._schema import MIGRATIONS, SCHEMA_VERSION
from intention_kernel.testing.conformance.outbox import (
    OutboxHarness,
    OutboxSourceConformance,
    OutboxStore,
    commit_events,
)


class SQLiteOutboxHarness(OutboxHarness):
    """Every ``open`` is a new adapter on the same file, as a restarted process would be."""

    claim_ttl = 0.3

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.path = directory / "outbox.db"

    async def _open(self) -> OutboxStore:
        return await SQLiteDurability.open(self.path)


class TestSQLiteOutbox(OutboxSourceConformance):
    @pytest.fixture
    def outbox_harness(self, tmp_path: Path) -> SQLiteOutboxHarness:
        return SQLiteOutboxHarness(tmp_path)


def test_a_schema_1_database_is_upgraded_with_its_outbox_kept(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"

    async def write() -> None:
        store = await SQLiteDurability.open(path)
        await commit_events(store, "t1", "turn-1", 2)
        await store.close()

    asyncio.run(write())
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("ALTER TABLE ik_outbox DROP COLUMN revision")  # back to schema 7 by hand
    conn.execute("DROP TABLE ik_relay_partitions")  # back to schema 6 by hand
    conn.execute("DROP TABLE ik_schedules")  # back to schema 5 by hand
    conn.execute("DROP TABLE ik_timers")
    for table in ("counters", "reservations", "limits"):  # back to schema 4 by hand
        conn.execute(f"DROP TABLE ik_budget_{table}")
    for table in ("slots", "waiters", "state"):
        conn.execute(f"DROP TABLE ik_provider_{table}")
    conn.execute("DROP TABLE ik_inbox")  # back to schema 3 by hand
    conn.execute("DROP TABLE ik_progress")
    conn.execute("DROP INDEX ik_heads_pending")  # back to schema 2 by hand
    conn.execute("DROP INDEX ik_receipts_open")
    conn.execute("ALTER TABLE ik_heads DROP COLUMN pending_interaction")
    conn.execute("ALTER TABLE ik_heads DROP COLUMN agent_fingerprint")
    for statement in reversed(MIGRATIONS[1]):  # back to schema 1 by hand
        if statement.startswith("CREATE INDEX"):
            conn.execute(f"DROP INDEX {statement.split()[2]}")
        else:
            conn.execute(f"ALTER TABLE ik_outbox DROP COLUMN {statement.split()[5]}")
    conn.execute("DELETE FROM ik_schema WHERE version > 1")
    conn.close()

    async def upgrade() -> list[tuple[int, int]]:
        store = await SQLiteDurability.open(path)
        batch = await store.claim("relay-a", limit=10, lease=30)
        await store.close()
        return [e.thread_order for e in batch]

    assert asyncio.run(upgrade()) == [(1, 0), (1, 1)]  # the turn's revision, filled in
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT max(version) FROM ik_schema").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_claim_stays_cheap_with_100k_delivered_rows(tmp_path: Path) -> None:
    path = tmp_path / "history.db"

    async def seed() -> None:
        store = await SQLiteDurability.open(path)
        await commit_events(store, "t-old", "turn-0", 1)
        await store.close()

    asyncio.run(seed())
    conn = sqlite3.connect(path, isolation_level=None)
    template = conn.execute(
        "SELECT thread_id, turn_id, event_id, sequence, document FROM ik_outbox"
        " ORDER BY position LIMIT 1"
    ).fetchone()
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO ik_outbox (thread_id, turn_id, event_id, sequence, document, delivered_at,"
        " delivered_us) VALUES (?, ?, ?, ?, ?, '2026-01-01T00:00:00+00:00', 1)",
        [(template[0], f"turn-{n}", f"e{n}", 0, template[4]) for n in range(1, 100_001)],
    )
    conn.execute("COMMIT")
    plan = " ".join(
        str(row)
        for row in conn.execute(
            "EXPLAIN QUERY PLAN SELECT position FROM ik_outbox"
            " WHERE delivered_at IS NULL ORDER BY position"
        )
    )
    conn.close()
    assert "ik_outbox_open" in plan

    async def claim() -> float:
        store = await SQLiteDurability.open(path)
        await commit_events(store, "t-new", "turn-1", 1)
        started = time.perf_counter()
        for _ in range(20):
            batch = await store.claim("relay-a", limit=100, lease=30)
            await store.release("relay-a", [e.position for e in batch])
        elapsed = (time.perf_counter() - started) / 20
        assert [e.event.thread_id for e in batch] == ["t-old", "t-new"]
        await store.close()
        return elapsed

    assert asyncio.run(claim()) < 0.05  # a scan of 100k rows would take longer on any disk


def test_the_relay_command_delivers_a_sqlite_outbox(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, out = tmp_path / "cli.db", tmp_path / "events.jsonl"

    async def seed() -> None:
        store = await SQLiteDurability.open(path)
        await commit_events(store, "t1", "turn-1", 3)
        await store.close()

    asyncio.run(seed())
    store_url, sink_url = f"sqlite:///{path}", f"file://{out}"
    assert run(["outbox", "relay", "--store", store_url, "--sink", sink_url, "--once"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["sequence"] for line in lines] == [0, 1, 2]
    capsys.readouterr()
    assert run(["outbox", "stats", "--store", store_url, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["pending"], stats["delivered"], stats["blocked_threads"]) == (0, 3, 0)
