"""``StoreInspector`` on the memory and SQLite stores: listing, status, lease, retention."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from intention_kernel.contracts.errors import ErrorCode, InvalidInputError, TurnConflictError
from intention_kernel.contracts.inspect import StoreInspector
from intention_kernel.durability.memory import MemoryDurability
from intention_kernel.durability.sqlite import SQLiteDurability
from tests.cli.support import Provider, commit_turn, uncertain_turn


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryDurability()
        return
    if request.param == "sqlite":
        opened = await SQLiteDurability.open(tmp_path / "s.db")
        try:
            yield opened
        finally:
            await opened.close()
        return
    from intention_kernel.durability.postgres import PostgresDurability
    from tests.support.postgres import drop_schema, postgres_dsn, scratch_schema

    dsn, schema = await _reachable(postgres_dsn()), scratch_schema("ik_inspect")
    pg = await PostgresDurability.open(dsn, schema=schema, setup=True, max_size=2)
    try:
        yield pg
    finally:
        await pg.close()
        await drop_schema(dsn, schema)


async def _reachable(dsn: str) -> str:
    """Skip locally, fail under CI=true, when the server does not answer."""
    import asyncpg

    try:
        conn = await asyncpg.connect(dsn, timeout=5)
    except Exception as exc:
        reason = f"PostgreSQL at {dsn} is not reachable: {type(exc).__name__}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    await conn.close()
    return dsn


async def test_inspector_queries(store: Any) -> None:
    assert isinstance(cast(object, store), StoreInspector)
    provider = Provider()
    await commit_turn(store, "a", "1")
    await commit_turn(store, "a", "2", interaction=True)
    await commit_turn(store, "b", "1", fingerprint="agent@2", events=2)
    await uncertain_turn(store, "c", "1", "k", provider)
    rows = await store.list_threads()
    assert [(r.thread_id, r.revision, r.turns) for r in rows] == [
        ("a", 2, 2),
        ("b", 1, 1),
        ("c", 0, 0),
    ]
    assert rows[1].fingerprint == "agent@2" and rows[2].uncertain_receipts == 1
    assert [r.thread_id for r in await store.list_threads(after="a", limit=1)] == ["b"]
    assert [r.thread_id for r in await store.list_threads(prefix="c")] == ["c"]
    status = await store.store_status()
    assert (status.threads, status.turns, status.uncertain_receipts) == (3, 3, 1)
    assert status.undelivered_events == 4 and status.dead_events == 0
    lease = await store.lease_info("a")
    assert not lease.held and lease.epoch == 2
    async with store.turn("a", "3"):
        held = await store.lease_info("a")
        assert (
            held.held and held.epoch is not None and held.epoch >= 2
        )  # bumped on acquire or on first write
    future = datetime.now(UTC) + timedelta(days=1)
    report = await store.prune_records(older_than=future, dry_run=True)
    assert report.turns == [("a", "1")] and report.kept_turns == 2
    report = await store.prune_records(older_than=future)
    with pytest.raises(TurnConflictError) as expired:
        await store.get_turn("a", "1")
    assert expired.value.code == ErrorCode.TURN_EXPIRED
    with pytest.raises(TurnConflictError) as retried:
        await commit_turn(store, "a", "1")  # a pruned turn is never executed again
    assert retried.value.code == ErrorCode.TURN_EXPIRED
    assert [t.turn_id for t in await store.list_turns("a")] == ["2"]
    assert (await store.prune_records(older_than=future)).turns == []
    assert (await store.load_checkpoint("a")) is not None
    assert (await store.store_status()).turns == 2
    with pytest.raises(InvalidInputError):
        await store.prune_records(older_than=datetime(2020, 1, 1))
