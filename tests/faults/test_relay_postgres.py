"""Relay processes on one PostgreSQL outbox (RELIABILITY.md I7, F17, F18), with a file sink.

- ``kill -9`` of a relay at RP1, RP2 (sink acked, not marked) and RP3, then a restart: every
  committed event is delivered, a duplicate is the same event (same id, same bytes), and per
  thread the first deliveries follow commit order.
- 3 relay processes while a producer commits ~3,000 events: each event delivered exactly once
  (no loss, no concurrent double delivery), per-thread order.
- 3 partitioned relay processes (``0/3``, ``1/3``, ``2/3``), one ``kill -9``'d at its first
  acknowledged round, before the mark: its share goes to the next live relay once its lease runs
  out, every event is delivered, per-thread order, and only that round goes out twice.

``IK_FAULT_SCALE`` multiplies the rounds and the event count.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from intention_kernel._crashpoints import RelayCrashPoint
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.testing.conformance.outbox import commit_events
from tests.support.postgres import drop_schema, scratch_schema

from .fault_support import SCALE
from .test_relay_processes import delivered_by, read_sink, start_relay, wait


async def create_schema(dsn: str) -> str:
    name = scratch_schema("ik_relay")
    store = await PostgresDurability.open(dsn, schema=name, setup=True, max_size=1)
    await store.close()
    return name


async def commit_workload(
    dsn: str, schema: str, *, threads: int, turns: int, per_turn: int, writers: int = 1
) -> None:
    """Turns of several threads; with ``writers`` > 1, threads commit concurrently, so
    positions interleave and commit out of position order across threads."""
    store = await PostgresDurability.open(dsn, schema=schema, max_size=max(2, writers))

    async def write(part: int) -> None:
        for turn in range(turns):
            for thread in range(part, threads, writers):
                await commit_events(store, f"t{thread}", f"turn-{turn:04d}", per_turn)

    try:
        await asyncio.gather(*(write(part) for part in range(writers)))
    finally:
        await store.close()


def shared_spec(dsn: str, schema: str, directory: Path, **extra: Any) -> dict[str, Any]:
    """Relays that deliver to one file and run until ``produced`` exists and nothing is
    pending."""
    return {
        "dsn": dsn,
        "schema": schema,
        "sink": str(directory / "shared.jsonl"),
        "batch_size": 50,
        "stop_file": str(directory / "produced"),
        **extra,
    }


async def holding(dsn: str, schema: str, relay_id: str, within: float = 60) -> None:
    """Wait until ``relay_id`` holds a partition lease."""
    conn = await asyncpg.connect(dsn)
    try:
        query = f'SELECT 1 FROM "{schema}".relay_partitions WHERE holder = $1'
        async with asyncio.timeout(within):
            while await conn.fetchval(query, relay_id) is None:  # noqa: ASYNC110 - the store
                await asyncio.sleep(0.02)
    finally:
        await conn.close()


async def committed_order(dsn: str, schema: str) -> dict[str, list[str]]:
    store = await PostgresDurability.open(dsn, schema=schema, max_size=1)
    try:
        order: dict[str, list[str]] = {}
        after = 0
        while batch := await store.read_outbox(after_position=after, limit=10_000):
            for stored in batch:
                order.setdefault(stored.event.thread_id, []).append(stored.event.id)
            after = batch[-1].position
        return order
    finally:
        await store.close()


@pytest.mark.parametrize("point", list(RelayCrashPoint))
def test_kill_9_of_a_postgres_relay_mid_batch_then_restart_delivers_everything(
    tmp_path: Path, dsn: str, point: RelayCrashPoint, capsys: pytest.CaptureFixture[str]
) -> None:
    rounds = 2 * SCALE
    duplicates = 0
    for n in range(rounds):
        schema, sink = asyncio.run(create_schema(dsn)), tmp_path / f"{n}.jsonl"
        try:
            asyncio.run(commit_workload(dsn, schema, threads=6, turns=5, per_turn=4, writers=3))
            spec = {
                "dsn": dsn,
                "schema": schema,
                "sink": str(sink),
                "batch_size": 40,
                "claim_ttl": 1.0,
            }
            crashed = start_relay({**spec, "crash": point.value, "nth": 1 + n % 3})
            assert wait(crashed) == -9, f"the relay did not reach {point}"
            assert wait(start_relay(spec)) == 0
            committed = asyncio.run(committed_order(dsn, schema))
        finally:
            asyncio.run(drop_schema(dsn, schema))
        first, counts = read_sink(sink)
        assert first == committed  # every event, and per thread in commit order
        duplicates += sum(count - 1 for count in counts.values())
        if point is RelayCrashPoint.RELAY_ACKED:
            assert max(counts.values()) == 2  # the acked, unmarked round went out again
        else:
            assert max(counts.values()) == 1
    with capsys.disabled():
        print(f"\npostgres relay kill -9 at {point}: rounds={rounds} duplicates={duplicates}")


def test_three_relay_processes_share_one_postgres_outbox(
    tmp_path: Path, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = asyncio.run(create_schema(dsn))
    spec = shared_spec(dsn, schema, tmp_path)
    sink, stop = Path(spec["sink"]), Path(spec["stop_file"])
    try:
        relays = [start_relay({**spec, "relay_id": f"relay-{i}"}) for i in range(3)]
        try:
            # 30 threads x 20 turns x 5 events = 3,000 events (x IK_FAULT_SCALE), committed by
            # 3 concurrent writers while the relays run.
            asyncio.run(
                commit_workload(dsn, schema, threads=30, turns=20 * SCALE, per_turn=5, writers=3)
            )
        finally:
            stop.touch()
        reports = delivered_by(relays)
        committed = asyncio.run(committed_order(dsn, schema))
    finally:
        asyncio.run(drop_schema(dsn, schema))
    first, counts = read_sink(sink)
    total = sum(len(ids) for ids in committed.values())
    assert total == 3000 * SCALE
    assert first == committed  # nothing lost, per-thread order
    assert set(counts.values()) == {1}  # never delivered twice
    with capsys.disabled():
        print(f"\n3 postgres relay processes: {total} events, each once; per relay {reports}")


def test_partitioned_relays_take_over_a_killed_relays_share(
    tmp_path: Path, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = asyncio.run(create_schema(dsn))
    # claim_ttl is the partition lease too: the killed relay's share moves after 1 s.
    spec = shared_spec(dsn, schema, tmp_path, claim_ttl=1.0)
    sink, stop = Path(spec["sink"]), Path(spec["stop_file"])
    try:
        # The doomed relay starts first and is holding its partition before anything commits,
        # so its first acknowledged round is certain; it dies there, before the mark, holding
        # claims and its partition's lease.
        relays = [
            start_relay(
                {**spec, "relay_id": "relay-0", "partition": "0/3"}
                | {"crash": RelayCrashPoint.RELAY_ACKED.value, "nth": 1}
            )
        ]
        asyncio.run(holding(dsn, schema, "relay-0"))
        relays += [
            start_relay({**spec, "relay_id": f"relay-{i}", "partition": f"{i}/3"}) for i in (1, 2)
        ]
        try:
            asyncio.run(
                commit_workload(dsn, schema, threads=30, turns=10 * SCALE, per_turn=5, writers=3)
            )
        finally:
            stop.touch()
        assert wait(relays[0], timeout=300) == -9, "relay-0 did not reach its crash point"
        reports = delivered_by(relays[1:], timeout=120)  # seconds when its share moves on
        committed = asyncio.run(committed_order(dsn, schema))
    finally:
        for process in relays:  # a failed run leaves none running
            process.kill()
        asyncio.run(drop_schema(dsn, schema))
    first, counts = read_sink(sink)
    total = sum(len(ids) for ids in committed.values())
    assert total == 1500 * SCALE
    assert first == committed  # nothing lost (the dead relay's share too), per-thread order
    duplicates = sum(count - 1 for count in counts.values())
    assert 0 < duplicates <= 50 and max(counts.values()) == 2  # its acked, unmarked round only
    assert sum(reports) == total  # the survivors marked every event, its share included
    with capsys.disabled():
        print(
            f"\npartitioned relays, one killed: {total} events, {duplicates} delivered twice;"
            f" survivors delivered {reports}"
        )
