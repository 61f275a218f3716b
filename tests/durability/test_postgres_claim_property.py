"""The PostgreSQL claim against random outboxes (hypothesis): a thread's events numbered in any
position order, some delivered, the next one dead, backing off or claimed by another relay.
Whatever the numbering, a claim is per thread a prefix of the undelivered events in
``(revision, sequence)`` order and never passes a held-back event; numbered in thread order
(as one database numbers them) it is exactly the reference rule of ``_outbox_rules``; and a
claim with room for everything takes every thread that is free to go, all of it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intention_kernel.durability._outbox_rules import Candidate, claimable
from intention_kernel.durability.postgres._outbox_sql import OutboxStatements
from tests.durability.conftest import open_store

_STATES = ("pending", "dead", "backing_off", "claimed")
_EVENT = (
    '{"id": "e", "type": "t", "occurred_at": "2026-01-01T00:00:00Z", "thread_id": "x",'
    ' "turn_id": "x", "sequence": 0, "correlation_id": "c"}'
)


@dataclass(frozen=True)
class Row:
    thread: str
    revision: int
    sequence: int
    delivered: bool
    state: str  # of an undelivered row: pending, dead, backing_off or claimed

    @property
    def order(self) -> tuple[int, int]:
        return (self.revision, self.sequence)

    @property
    def blocked(self) -> bool:
        return not self.delivered and self.state != "pending"


@st.composite
def _thread(draw: st.DrawFn, name: str) -> list[Row]:
    """A thread's events in thread order, as a store could hold them: a delivered prefix,
    then the first undelivered one in any state (claimed: a claimed prefix of some length)."""
    keys = [
        (revision, sequence)
        for revision in range(1, draw(st.integers(1, 3)) + 1)
        for sequence in range(draw(st.integers(1, 3)))
    ]
    delivered = draw(st.integers(0, len(keys)))
    state = draw(st.sampled_from(_STATES))
    claimed = draw(st.integers(1, len(keys))) if state == "claimed" else 1
    rows = []
    for n, (revision, sequence) in enumerate(keys):
        undelivered = n - delivered
        row_state = state if 0 <= undelivered < claimed else "pending"
        rows.append(Row(name, revision, sequence, n < delivered, row_state))
    return rows


@st.composite
def _outboxes(draw: st.DrawFn) -> tuple[list[tuple[int, Row]], int]:
    rows = [row for name in ("a", "b", "c") for row in draw(_thread(name))]
    in_order = draw(st.booleans())
    if in_order:  # threads interleaved at random, each in its own order
        positions = draw(st.permutations(range(1, len(rows) + 1)))
        placed = sorted(zip(positions, rows, strict=True), key=lambda p: p[0])
        by_thread = {t: iter([r for r in rows if r.thread == t]) for t in "abc"}
        numbered = [(p, next(by_thread[r.thread])) for p, r in placed]
    else:
        positions = draw(st.permutations(range(1, len(rows) + 1)))
        numbered = list(zip(positions, rows, strict=True))
    return numbered, draw(st.integers(1, 2 * len(rows)))


def _numbered_in_thread_order(outbox: list[tuple[int, Row]]) -> bool:
    by_thread: dict[str, list[tuple[int, int]]] = {}
    for _, row in sorted(outbox, key=lambda p: p[0]):
        by_thread.setdefault(row.thread, []).append(row.order)
    return all(orders == sorted(orders) for orders in by_thread.values())


async def _claim(
    conn: asyncpg.Connection, schema: str, outbox: list[tuple[int, Row]], limit: int
) -> set[int]:
    """Write the rows, claim as ``relay-a``, roll back; the claimed rows."""
    s = f'"{schema}".outbox'
    now = datetime.now(UTC)
    tx = conn.transaction()
    await tx.start()
    try:
        for position, row in outbox:
            await conn.execute(
                f"INSERT INTO {s} (position, thread_id, turn_id, revision, sequence, event,"
                " delivered_at, dead, next_attempt_at, claimed_by, claimed_until)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                position,
                row.thread,
                f"turn-{row.revision}",
                row.revision,
                row.sequence,
                _EVENT,
                now if row.delivered else None,
                row.state == "dead" and not row.delivered,
                now + timedelta(minutes=5) if row.state == "backing_off" else None,
                "relay-z" if row.state == "claimed" else None,
                now + timedelta(minutes=5) if row.state == "claimed" else None,
            )
        found = await conn.fetch(OutboxStatements(schema).claim, "relay-a", limit, 30.0)
    finally:
        await tx.rollback()
    return {r["position"] for r in found}


def test_claims_keep_each_thread_in_order_however_it_is_numbered(dsn: str, schema: str) -> None:
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(open_store(dsn, schema))
    conn = loop.run_until_complete(asyncpg.connect(dsn))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_outboxes())
    def check(case: tuple[list[tuple[int, Row]], int]) -> None:
        outbox, limit = case
        seen.append(_numbered_in_thread_order(outbox))
        taken = loop.run_until_complete(_claim(conn, schema, outbox, limit))
        assert len(taken) <= limit
        position_of = {id(row): position for position, row in outbox}
        rows = [row for _, row in outbox]
        for thread in "abc":
            mine = sorted((r for r in rows if r.thread == thread), key=lambda r: r.order)
            open_rows = [r for r in mine if not r.delivered]
            got = [r for r in open_rows if position_of[id(r)] in taken]
            assert got == open_rows[: len(got)], thread  # a prefix, in thread order
            assert not any(r.blocked for r in got), thread
            free = bool(open_rows) and not open_rows[0].blocked
            if limit >= len(rows) and free:
                assert got == open_rows, thread  # room for all: all of a free thread
        if _numbered_in_thread_order(outbox):
            now = datetime.now(UTC)
            later = now + timedelta(minutes=5)
            reference = claimable(
                (
                    Candidate(
                        position,
                        row.thread,
                        row.state == "dead",
                        later if row.state == "claimed" else None,
                        later if row.state == "backing_off" else None,
                    )
                    for position, row in sorted(outbox, key=lambda p: p[0])
                    if not row.delivered
                ),
                now=now,
                limit=limit,
            )
            assert taken == set(reference)

    seen: list[bool] = []  # per example: numbered in thread order
    try:
        check()
        # Both kinds of numbering were tried, many times each.
        assert seen.count(True) >= 30 and seen.count(False) >= 30, seen.count(True)
    finally:
        loop.run_until_complete(conn.close())
        loop.run_until_complete(store.close())
        loop.close()
