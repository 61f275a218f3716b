"""Thread listing filters at scale and across migrations (SQLite and PostgreSQL).

The plans are checked with ``EXPLAIN`` on 20,000 seeded threads (wall time is not asserted):
every page walks an index in id order and stops at the page size. The migration tests start
from a store at the previous schema version whose heads hold interactions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bench.inspector_threads import (
    CURRENT,
    _document,
    plan,
    seed_postgres,
    seed_sqlite,
    thread_id,
)
from intention_kernel.durability.engine import ThreadQuery
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.durability.sqlite import _inspect as sqlite_inspect
from intention_kernel.durability.sqlite import _schema as sqlite_schema

COUNT = 20_000

QUERIES = [
    ThreadQuery(None, None, 100),
    ThreadQuery(None, thread_id(COUNT - 100), 100),
    ThreadQuery("t00042", None, 100),
    ThreadQuery(None, None, 100, uncertain=True),
    ThreadQuery(None, None, 100, uncertain=False),
    ThreadQuery(None, None, 100, pending=True),
    ThreadQuery(None, None, 100, pending=False),
    ThreadQuery(None, None, 100, corrupt=False),
    ThreadQuery(None, None, 100, fingerprint_not_in=frozenset({CURRENT})),
    ThreadQuery(None, None, 100, pending=True, fingerprint_not_in=frozenset({CURRENT})),
]


# ---------------------------------------------------------------- SQLite


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("listing") / "threads.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        sqlite_schema.migrate(conn)
    finally:
        conn.close()
    seed_sqlite(path, plan(COUNT))
    return path


@pytest.mark.parametrize("query", QUERIES, ids=repr)
async def test_sqlite_pages_walk_an_index_in_id_order(sqlite_store: Path, query: Any) -> None:
    sql, args = sqlite_inspect._candidates(query, query.after or "")
    conn = sqlite3.connect(sqlite_store)
    try:
        steps = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args)]
    finally:
        conn.close()
    text = "\n".join(steps)
    assert "FOR ORDER BY" not in text, text  # no sort: the walk stops at the page size
    per_row = ("SCAN CONSTANT ROW", "SCAN (subquery")  # the corrupt check of one head
    assert not any(
        s.startswith("SCAN") and "INDEX" not in s and not s.startswith(per_row) for s in steps
    ), text
    if query.pending:
        assert "ik_heads_pending" in text, text
    if query.uncertain:
        assert "ik_receipts_open" in text, text


async def test_sqlite_filters_answer_on_the_seeded_store(sqlite_store: Path) -> None:
    store = await SQLiteDurability.open(sqlite_store)
    try:
        pending = await store.list_threads(pending=True, limit=1000)
        assert len(pending) == COUNT // 100 and {r.pending_interaction for r in pending} == {
            "confirmation"
        }
        old = await store.list_threads(fingerprint_not_in=[CURRENT], limit=1000)
        assert all(r.fingerprint != CURRENT for r in old) and len(old) > 0
        deep = await store.list_threads(after=thread_id(COUNT - 3))
        assert [r.thread_id for r in deep] == [thread_id(COUNT - 2), thread_id(COUNT - 1)]
    finally:
        await store.close()


def _result(thread: str, kind: str | None) -> str:
    text: str = _document(kind is not None, "agent@1").replace("@@THREAD@@", thread)
    return text if kind in (None, "confirmation") else text.replace('"confirmation"', f'"{kind}"')


async def test_sqlite_migration_fills_the_head_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(sqlite_schema._SCHEMA_TABLE)
    for number, statements in enumerate(sqlite_schema.MIGRATIONS[:2], start=1):
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO ik_schema VALUES (?, 'then')", (number,))
    for thread, text in [
        ("a", _result("a", "question")),
        ("b", _result("b", None)),
        ("c", '{"not": "a checkpoint"'),
    ]:
        conn.execute(
            "INSERT INTO ik_turns (thread_id, turn_id, revision, result, committed_at)"
            " VALUES (?, 'turn-1', 1, ?, '2026-01-01T00:00:00+00:00')",
            (thread, text),
        )
        conn.execute("INSERT INTO ik_heads VALUES (?, 1, 'turn-1')", (thread,))
    conn.close()
    store = await SQLiteDurability.open(path)
    try:
        rows = {r.thread_id: r for r in await store.list_threads()}
        assert rows["a"].pending_interaction == "question" and rows["a"].fingerprint == "agent@1"
        assert rows["b"].pending_interaction is None and rows["c"].corrupt is not None
        assert [r.thread_id for r in await store.list_threads(pending=True)] == ["a"]
        assert [r.thread_id for r in await store.list_threads(corrupt=True)] == ["c"]
        assert [r.thread_id for r in await store.list_threads(fingerprint_not_in=["x"])] == [
            "a",
            "b",
            "c",
        ]
        assert [r.thread_id for r in await store.list_threads(fingerprint_not_in=["agent@1"])] == [
            "c"
        ]
    finally:
        await store.close()


# ---------------------------------------------------------------- PostgreSQL


@pytest.fixture
async def pg_schema(dsn: str) -> AsyncIterator[tuple[str, str]]:
    from intention_kernel.durability.postgres import drop_schema
    from tests.support.postgres import scratch_schema

    schema = scratch_schema("ik_listing")
    try:
        yield dsn, schema
    finally:
        await drop_schema(dsn, schema)


async def test_postgres_pages_walk_an_index_in_id_order(pg_schema: tuple[str, str]) -> None:
    from intention_kernel.durability.postgres import PostgresDurability, admin_connection
    from intention_kernel.durability.postgres import _inspect as pg_inspect

    dsn, schema = pg_schema
    await (await PostgresDurability.open(dsn, schema=schema, setup=True)).close()
    async with admin_connection(dsn) as conn:
        await seed_postgres(conn, schema, plan(COUNT))
        # ``prefix`` is a filter on the id walk here (the database's collation decides the
        # order, so a prefix is not an index range): left out.
        for query in [q for q in QUERIES if q.prefix is None]:
            sql = pg_inspect._chosen(f'"{schema}"', query)
            rows = await conn.fetch(f"EXPLAIN {sql}", *pg_inspect._arguments(query))
            text = "\n".join(r[0] for r in rows)
            assert "Seq Scan" not in text, (query, text)
            assert "Index" in text, (query, text)
            if query.pending:
                assert "heads_pending" in text, text
            if query.uncertain:
                assert "receipts_open" in text, text


async def test_postgres_migration_5_fills_the_head_columns(pg_schema: tuple[str, str]) -> None:
    from intention_kernel.durability.postgres import PostgresDurability, admin_connection
    from intention_kernel.durability.postgres import _schema as pg_schema_module
    from tests.support.postgres import schema_at_version

    dsn, schema = pg_schema
    async with admin_connection(dsn) as conn:
        s = await schema_at_version(conn, schema, 4)
        for thread, text in [
            ("a", _result("a", "question")),
            ("b", _result("b", None)),
            ("c", '{"not": "a checkpoint"'),
        ]:
            await conn.execute(
                f"INSERT INTO {s}.turns (thread_id, turn_id, revision, result)"
                " VALUES ($1, 'turn-1', 1, $2)",
                thread,
                text,
            )
            await conn.execute(f"INSERT INTO {s}.heads VALUES ($1, 1, 'turn-1')", thread)
    store = await PostgresDurability.open(dsn, schema=schema, setup=True)
    try:
        assert (await store.schema_info()).version == len(pg_schema_module.MIGRATIONS)
        rows = {r.thread_id: r for r in await store.list_threads()}
        assert rows["a"].pending_interaction == "question" and rows["a"].fingerprint == "agent@1"
        assert rows["b"].pending_interaction is None and rows["c"].corrupt is not None
        assert [r.thread_id for r in await store.list_threads(pending=True)] == ["a"]
        assert [r.thread_id for r in await store.list_threads(corrupt=True)] == ["c"]
        assert [r.thread_id for r in await store.list_threads(fingerprint_not_in=["agent@1"])] == [
            "c"
        ]
    finally:
        await store.close()
