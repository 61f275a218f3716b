"""The PostgreSQL adapter as an ``OutboxSource``: the shared suite on a scratch schema, plus
what is PostgreSQL's own (positions that do not order threads, upgrade from schema 1,
concurrent relays, the relay command)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from intention_kernel.cli._app import run
from intention_kernel.contracts.errors import ConfigurationError
from intention_kernel.contracts.events import KernelEvent
from intention_kernel.contracts.sinks import PublishOutcome
from intention_kernel.durability.postgres import MIGRATIONS, PostgresDurability
from intention_kernel.durability.postgres._outbox_sql import OutboxStatements, partition_of
from intention_kernel.relay import OutboxRelay, Partition, Partitions
from intention_kernel.testing.conformance.outbox import (
    OutboxHarness,
    OutboxSourceConformance,
    OutboxStore,
    commit_events,
)
from tests.support.postgres import drop_schema, schema_at_version, scratch_schema


class PostgresOutboxHarness(OutboxHarness):
    """One scratch schema per test; every ``open`` is a new pool, as a restarted relay."""

    claim_ttl = 0.3

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self.dsn = dsn
        self.schema = scratch_schema("ik_outbox")
        self._created = False

    async def _open(self) -> OutboxStore:
        store = await PostgresDurability.open(
            self.dsn, schema=self.schema, setup=not self._created, min_size=0, max_size=4
        )
        self._created = True
        return store

    async def _cleanup(self) -> None:
        if self._created:
            await drop_schema(self.dsn, self.schema)


class TestPostgresOutbox(OutboxSourceConformance):
    @pytest.fixture
    def outbox_harness(self, dsn: str) -> PostgresOutboxHarness:
        return PostgresOutboxHarness(dsn)


# ---------------------------------------------------------------- PostgreSQL's own


async def _open(dsn: str, schema: str, *, setup: bool = False) -> PostgresDurability:
    return await PostgresDurability.open(dsn, schema=schema, setup=setup, min_size=0, max_size=4)


@pytest.fixture
def pg_schema(dsn: str) -> Iterator[str]:
    name = scratch_schema("ik_outbox")
    yield name
    asyncio.run(drop_schema(dsn, name))


async def _write_concurrently(
    store: PostgresDurability, *, threads: int, turns: int, per_turn: int, writers: int
) -> None:
    async def write(part: int) -> None:
        for turn in range(turns):
            for thread in range(part, threads, writers):
                await commit_events(store, f"t{thread}", f"turn-{turn:04d}", per_turn)

    await asyncio.gather(*(write(part) for part in range(writers)))


def test_positions_follow_commit_order_within_a_thread_only(dsn: str, pg_schema: str) -> None:
    """Concurrent writers: per thread, position order is thread order (revision, sequence)
    on one database; the claim does not rely even on that (``test_postgres_thread_keys``)."""

    async def main() -> None:
        store = await _open(dsn, pg_schema, setup=True)
        try:
            await _write_concurrently(store, threads=8, turns=6, per_turn=3, writers=4)
            outbox = await store.read_outbox(limit=10_000)
            for thread in {e.event.thread_id for e in outbox}:
                mine = [e for e in outbox if e.event.thread_id == thread]
                keys = [(e.event.turn_id, e.event.sequence) for e in mine]
                assert keys == sorted(keys)  # turn ids sort in turn order here
                assert [e.thread_order for e in mine] == sorted(e.thread_order for e in mine)
        finally:
            await store.close()

    asyncio.run(main())


def test_a_row_locked_elsewhere_holds_back_its_thread(dsn: str, pg_schema: str) -> None:
    """SKIP LOCKED skips a thread's first row while another transaction holds it; the rows
    after it in that thread must not be claimed, other threads flow."""

    async def main() -> None:
        store = await _open(dsn, pg_schema, setup=True)
        conn = await asyncpg.connect(dsn)
        try:
            await commit_events(store, "t1", "turn-1", 3)
            await commit_events(store, "t2", "turn-1", 2)
            first = min(e.position for e in await store.read_outbox(thread_id="t1"))
            async with conn.transaction():
                await conn.execute(
                    f'SELECT 1 FROM "{pg_schema}".outbox WHERE position = $1 FOR UPDATE', first
                )
                batch = await store.claim("relay-a", limit=100, lease=30)
                assert {e.event.thread_id for e in batch} == {"t2"}
            batch = await store.claim("relay-a", limit=100, lease=30)
            assert [(e.event.thread_id, e.event.sequence) for e in batch] == [
                ("t1", 0),
                ("t1", 1),
                ("t1", 2),
            ]
        finally:
            await conn.close()
            await store.close()

    asyncio.run(main())


def test_a_schema_1_database_is_upgraded_with_its_outbox_kept(dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await schema_at_version(conn, pg_schema, 1)
        finally:
            await conn.close()
        opened = await _open(dsn, pg_schema, setup=True)  # applies migrations 2 to 11
        try:
            assert await opened.verify() == len(MIGRATIONS) == 11
            await commit_events(opened, "t1", "turn-1", 2)
            batch = await opened.claim("relay-a", limit=10, lease=30)
            assert [e.event.sequence for e in batch] == [0, 1]
        finally:
            await opened.close()

    asyncio.run(main())


class _CheckingSink:
    """Records deliveries and fails the test on a concurrent double delivery."""

    def __init__(self) -> None:
        self.events: list[KernelEvent] = []
        self.in_flight: set[str] = set()
        self.overlaps = 0

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        ids = [e.id for e in events]
        self.overlaps += len(self.in_flight.intersection(ids))
        self.in_flight.update(ids)
        await asyncio.sleep(0.001)
        self.in_flight.difference_update(ids)
        self.events.extend(events)
        return [PublishOutcome.ok() for _ in events]

    async def close(self) -> None:
        pass


def test_three_relay_tasks_deliver_3000_events_once_in_thread_order(
    dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        store = await _open(dsn, pg_schema, setup=True)
        sink = _CheckingSink()
        sources = [await _open(dsn, pg_schema) for _ in range(3)]
        relays = [
            OutboxRelay(source, sink, relay_id=f"relay-{i}", batch_size=50, poll_interval=0.02)
            for i, source in enumerate(sources)
        ]
        tasks = [asyncio.create_task(r.run()) for r in relays]
        try:
            # 30 threads x 20 turns x 5 events, committed by 3 writers while relays run.
            await _write_concurrently(store, threads=30, turns=20, per_turn=5, writers=3)
            deadline = time.monotonic() + 60
            while (await store.outbox_stats()).pending:
                assert time.monotonic() < deadline, await store.outbox_stats()
                await asyncio.sleep(0.05)
        finally:
            for relay in relays:
                relay.stop()
            await asyncio.gather(*tasks)
            for source in sources:
                await source.close()
        committed: dict[str, list[str]] = {}
        for stored in await store.read_outbox(limit=10_000):
            committed.setdefault(stored.event.thread_id, []).append(stored.event.id)
        await store.close()
        ids = [e.id for e in sink.events]
        assert len(ids) == 3000 and len(set(ids)) == 3000  # no loss, never twice
        assert sink.overlaps == 0
        delivered: dict[str, list[str]] = {}
        for event in sink.events:
            delivered.setdefault(event.thread_id, []).append(event.id)
        assert delivered == committed  # per-thread commit order
        assert sum(r.stats.delivered for r in relays) == 3000

    asyncio.run(main())


def test_the_relay_command_delivers_a_postgres_outbox(
    dsn: str, pg_schema: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def seed() -> None:
        store = await _open(dsn, pg_schema, setup=True)
        await commit_events(store, "t1", "turn-1", 3)
        await store.close()

    asyncio.run(seed())
    out = tmp_path / "events.jsonl"
    store_url = f"{dsn}{'&' if '?' in dsn else '?'}schema={pg_schema}&listen=1"
    relay = ["outbox", "relay", "--store", store_url, "--sink", f"file://{out}", "--once"]
    assert run(relay) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["sequence"] for line in lines] == [0, 1, 2]
    capsys.readouterr()
    assert run(["outbox", "stats", "--store", store_url, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["pending"], stats["delivered"], stats["blocked_threads"]) == (0, 3, 0)


def test_listen_wakes_a_waiting_relay_on_commit_and_is_off_by_default(
    dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        writer = await _open(dsn, pg_schema, setup=True)
        plain = await _open(dsn, pg_schema)
        listener = await PostgresDurability.open(dsn, schema=pg_schema, max_size=2, listen=True)
        try:
            assert not await writer.outbox_notify_enabled()
            started = time.perf_counter()
            await plain.wait_for_events(0.2)  # without listen: a plain sleep
            assert time.perf_counter() - started >= 0.19
            await listener.wait_for_events(0.01)  # consumes the wake-up given at start
            await writer.set_outbox_notify(True)
            assert await writer.outbox_notify_enabled()
            waiting = asyncio.create_task(listener.wait_for_events(10))
            await asyncio.sleep(0.05)
            started = time.perf_counter()
            await commit_events(writer, "t1", "turn-1", 1)
            await asyncio.wait_for(waiting, 5)
            assert time.perf_counter() - started < 2
            await writer.set_outbox_notify(False)
            assert not await writer.outbox_notify_enabled()
        finally:
            for store in (writer, plain, listener):
                await store.close()

    asyncio.run(main())


def test_listen_needs_a_url(dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        pool = await asyncpg.create_pool(dsn, min_size=0, max_size=1)
        try:
            store = await _open(dsn, pg_schema, setup=True)
            await store.close()
            with pytest.raises(ConfigurationError, match="listen"):
                await PostgresDurability.open(pool, schema=pg_schema, listen=True)
        finally:
            await pool.close()

    asyncio.run(main())


def test_claim_stays_cheap_with_100k_delivered_rows(dsn: str, pg_schema: str) -> None:
    """Claims and stats read the partial indexes, not the delivered history."""

    async def main() -> None:
        store = await _open(dsn, pg_schema, setup=True)
        conn = await asyncpg.connect(dsn)
        try:
            await commit_events(store, "t-old", "turn-0", 1)
            await conn.execute(
                f'INSERT INTO "{pg_schema}".outbox'
                " (thread_id, turn_id, revision, sequence, event, delivered_at)"
                " SELECT thread_id, 'turn-' || n, n, 0, event, now() - interval '1 day'"
                f' FROM "{pg_schema}".outbox, generate_series(1, 100000) AS n'
            )
            await conn.execute(f'ANALYZE "{pg_schema}".outbox')
            plan = "\n".join(
                r[0]
                for r in await conn.fetch(
                    f"EXPLAIN {OutboxStatements(store.schema).claim}", "relay-a", 100, 30.0
                )
            )
            assert "Seq Scan" not in plan, plan
            await commit_events(store, "t-new", "turn-1", 1)
            started = time.perf_counter()
            for _ in range(20):
                batch = await store.claim("relay-a", limit=100, lease=30)
                await store.release("relay-a", [e.position for e in batch])
            elapsed = (time.perf_counter() - started) / 20
            assert [e.event.thread_id for e in batch] == ["t-old", "t-new"]
            stats = await store.outbox_stats()
            assert (stats.pending, stats.delivered) == (2, 100_000)
            assert elapsed < 0.05, elapsed
        finally:
            await conn.close()
            await store.close()

    asyncio.run(main())


def _rows_visited(plan: dict[str, Any]) -> int:
    """Rows a plan node and its children produced or filtered away, over all their loops."""
    loops = int(plan.get("Actual Loops", 1))
    own = sum(
        float(plan.get(key, 0))
        for key in ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Join Filter")
    )
    return int(own * loops) + sum(_rows_visited(child) for child in plan.get("Plans", []))


async def rows_visited(conn: Any, sql: str, *args: object) -> int:
    """Rows the statement's plan visits (run, then rolled back)."""
    tx = conn.transaction()
    await tx.start()
    try:
        answer = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args)
    finally:
        await tx.rollback()
    return _rows_visited(json.loads(answer)[0]["Plan"])


@pytest.mark.parametrize("per_thread", [250, 2000])
def test_claim_work_is_bounded_by_the_batch_with_a_backlog_and_healthy_statistics(
    dsn: str, pg_schema: str, per_thread: int
) -> None:
    """A healthy store's statistics (delivered history, analyzed) and then a backlog queued by
    an outage: the claim walks the pending rows in position order and stops at the batch size,
    and a mark finds its rows by primary key, so the rows they visit do not grow with the
    backlog (the old claim tested every pending row against its thread's earlier rows first:
    seconds per claim at 4 x 1,000; the old mark scanned every pending row)."""

    async def main() -> None:
        store = await _open(dsn, pg_schema, setup=True)
        conn = await asyncpg.connect(dsn)
        table = f'"{pg_schema}".outbox'
        try:
            await commit_events(store, "t0", "turn-0", 1)
            await conn.execute(
                f"INSERT INTO {table} (thread_id, turn_id, revision, sequence, event,"
                " delivered_at)"
                f" SELECT 't' || (n % 4), 'old-' || n, n, 0, event, now() FROM {table},"
                " generate_series(1, 10000) AS n"
            )
            await conn.execute(f"UPDATE {table} SET delivered_at = now()")
            await conn.execute(f"ANALYZE {table}")  # what autovacuum saw: nothing pending
            await conn.execute(
                f"INSERT INTO {table} (thread_id, turn_id, revision, sequence, event)"
                f" SELECT 't' || (n % 4), 'new-' || n, 10000 + n, 0,"
                f" (SELECT event FROM {table} LIMIT 1)"
                f" FROM generate_series(1, $1::int) AS n",
                4 * per_thread,
            )
            first = await conn.fetchval(
                f"SELECT min(position) FROM {table} WHERE delivered_at IS NULL"
            )

            sql = OutboxStatements(store.schema)
            # A batch of 100 passes through about 25 plan nodes (the walk, each thread's rows
            # in thread order, the locks, the update): the same at 4 x 250 and 4 x 2,000.
            assert await rows_visited(conn, sql.claim, "relay-a", 100, 30.0) < 3_000
            # Each round's mark (and a release) probes its rows, not every pending row.
            four = list(range(first, first + 4))
            assert await rows_visited(conn, sql.mark_delivered, four) < 50
            assert await rows_visited(conn, sql.release, four, "relay-a") < 50
            batch = await store.claim("relay-a", limit=100, lease=30)
            assert [e.position for e in batch] == list(range(first, first + 100))
            # Held back behind that claim, the next relay still finds the rest in position order.
            other = await store.claim("relay-b", limit=100, lease=30)
            assert other == []
            await store.release("relay-a", [e.position for e in batch[50:]])
            assert [e.position for e in await store.claim("relay-b", limit=10, lease=30)] == []
            await store.mark_delivered("relay-a", [e.position for e in batch[:50]])
            again = await store.claim("relay-b", limit=10, lease=30)
            assert [e.position for e in again] == list(range(first + 50, first + 60))
        finally:
            await conn.close()
            await store.close()

    asyncio.run(main())


def test_a_partitions_claim_does_not_walk_the_other_partitions_backlog(
    dsn: str, pg_schema: str
) -> None:
    """A relay whose share is empty while others have a backlog: its claim probes its own
    partition's index and visits next to nothing (a filter on the walk would visit the whole
    backlog at every poll); a busy share's claim stays bounded by the batch."""

    async def main() -> None:
        store = await _open(dsn, pg_schema, setup=True)
        conn = await asyncpg.connect(dsn)
        table = f'"{pg_schema}".outbox'
        try:
            await commit_events(store, "t0", "turn-0", 1)
            await conn.execute(
                f"INSERT INTO {table} (thread_id, turn_id, revision, sequence, event)"
                f" SELECT 't' || (n % 40), 'b-' || n, n, 0, (SELECT event FROM {table} LIMIT 1)"
                " FROM generate_series(1, 20000) AS n"
            )
            rows = await conn.fetch(f"SELECT DISTINCT {partition_of(64)} AS p FROM {table}")
            used = {row["p"] for row in rows}
            empty, busy = min(set(range(64)) - used), min(used)
            served = await store.hold_partition("relay-a", Partition(empty, 64), lease=30)
            assert empty in served.served  # and the partition's index is built
            await conn.execute(f"ANALYZE {table}")
            sql = OutboxStatements(store.schema)
            assert await rows_visited(conn, sql.claim_in(64), "relay-a", 100, 30.0, empty) < 10
            # (a batch of 100 through about 25 plan nodes, as in the test above)
            assert await rows_visited(conn, sql.claim_in(64), "relay-a", 100, 30.0, busy) < 3_000
            # The plan a long-lived connection keeps (generic) probes the partition's index.
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            await conn.execute(
                f"PREPARE partition_claim(text, int, float8, int) AS {sql.claim_in(64)}"
            )
            plan = await conn.fetch("EXPLAIN EXECUTE partition_claim('x', 100, 30, 0)")
            assert "Index Scan using outbox_open_in_64" in "\n".join(row[0] for row in plan)
            shares = Partitions(64, frozenset({busy}))
            batch = await store.claim("relay-b", limit=100, lease=30, partitions=shares)
            positions = [e.position for e in batch]
            assert batch and positions == sorted(positions)
            placed = await conn.fetch(  # the rows' own threads (the copied events name t0)
                f"SELECT DISTINCT {partition_of(64)} AS p FROM {table}"
                " WHERE position = ANY($1::bigint[])",
                positions,
            )
            assert {row["p"] for row in placed} == {busy}
            assert (
                await store.claim(
                    "relay-b", limit=100, lease=30, partitions=Partitions(64, frozenset({empty}))
                )
                == []
            )
        finally:
            await conn.close()
            await store.close()

    asyncio.run(main())
