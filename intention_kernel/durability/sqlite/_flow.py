"""``SQLiteFlow``: the ``FlowStorage`` role of the embedded store (tables of migration 7).

SQLite has one writer at a time: each member is one ``BEGIN IMMEDIATE`` transaction that reads
what it needs and applies ``_flow_rules`` in Python, so two processes' reservations or slot
grants never interleave. Reservations and limits are committed durably; slot grants, queue
places and cool-downs are not waited for (``_unsynced_write``): after a power loss a slot or a
place is simply asked for again. Times come from the store's clock, stored as ``iso``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ...contracts.flow import (
    BudgetLine,
    BudgetUsage,
    LimitOverride,
    ProviderStatus,
    Reservation,
    Reserved,
    SlotAnswer,
    SlotRequest,
    window_bounds,
)
from .._flow_rules import WAITER_GRACE, Counter, admits, limits_in_force, minute_of, slot_answer
from .._writes import utc_now
from ._connection import Connection
from ._inbox import _unsynced_write
from ._inbox_rows import iso, later

__all__ = ["SQLiteFlow"]

_COUNTER = (
    "SELECT per, tokens_used, tokens_reserved, cost_used, cost_reserved, calls, tokens_limit,"
    " cost_limit FROM ik_budget_counters WHERE budget = ? AND scope_key = ? AND window_start = ?"
)


def _overrides(conn: sqlite3.Connection, budget: str) -> dict[str, tuple[Any, Any]]:
    rows = conn.execute(
        "SELECT scope_key, tokens, cost FROM ik_budget_limits WHERE budget = ?", (budget,)
    ).fetchall()
    return {key: (tokens, cost) for key, tokens, cost in rows}


def _usage(
    conn: sqlite3.Connection, budget: str, key: str, start: datetime, counter: Counter
) -> BudgetUsage:
    line = BudgetLine(budget, key, counter.per, counter.tokens_limit, counter.cost_limit)
    tokens, cost, overridden = limits_in_force(line, _overrides(conn, budget))
    return BudgetUsage(
        budget,
        key,
        counter.per,
        start,
        window_bounds(counter.per, start)[1],
        counter.tokens_used,
        counter.tokens_reserved,
        counter.cost_used,
        counter.cost_reserved,
        counter.calls,
        tokens,
        cost,
        overridden,
    )


class SQLiteFlow:
    """``FlowStorage`` over the ``ik_budget_*`` and ``ik_provider_*`` tables."""

    def __init__(self, db: Connection, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._db = db
        self._now = clock

    # ---------------------------------------------------------------- budgets

    async def reserve(
        self, line: BudgetLine, tokens: int, cost: float, reservation_id: str
    ) -> Reserved:
        def reserve(conn: sqlite3.Connection) -> Reserved:
            start, _ = window_bounds(line.per, self._now())
            at = (line.budget, line.key, iso(start))
            found = conn.execute(_COUNTER, at).fetchone()
            counter = Counter(*found) if found is not None else Counter(line.per)
            limits = limits_in_force(line, _overrides(conn, line.budget))
            if not admits(counter, limits[0], limits[1]):
                if found is None:
                    counter.tokens_limit, counter.cost_limit = line.tokens, line.cost
                return Reserved(None, _usage(conn, line.budget, line.key, start, counter))
            conn.execute(
                "INSERT INTO ik_budget_counters (budget, scope_key, window_start, per,"
                " tokens_used, tokens_reserved, cost_used, cost_reserved, calls, tokens_limit,"
                " cost_limit) VALUES (?, ?, ?, ?, 0, ?, 0, ?, 1, ?, ?)"
                " ON CONFLICT (budget, scope_key, window_start) DO UPDATE SET"
                " tokens_reserved = tokens_reserved + excluded.tokens_reserved,"
                " cost_reserved = cost_reserved + excluded.cost_reserved, calls = calls + 1,"
                " tokens_limit = excluded.tokens_limit, cost_limit = excluded.cost_limit",
                (*at, line.per, tokens, cost, line.tokens, line.cost),
            )
            conn.execute(
                "INSERT INTO ik_budget_reservations (id, budget, scope_key, window_start, tokens,"
                " cost, reserved_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (reservation_id, *at, tokens, cost, iso(self._now())),
            )
            counter = Counter(*conn.execute(_COUNTER, at).fetchone())
            reservation = Reservation(reservation_id, line.budget, line.key, start, tokens, cost)
            return Reserved(reservation, _usage(conn, line.budget, line.key, start, counter))

        return await self._db.write(reserve, what="budget reserve")

    async def settle(self, reservation_id: str, tokens: int, cost: float) -> bool:
        def settle(conn: sqlite3.Connection) -> bool:
            found = conn.execute(
                "DELETE FROM ik_budget_reservations WHERE id = ?"
                " RETURNING budget, scope_key, window_start, tokens, cost",
                (reservation_id,),
            ).fetchone()
            if found is None:
                return False
            budget, key, start, reserved, reserved_cost = found
            conn.execute(
                "UPDATE ik_budget_counters SET tokens_reserved = tokens_reserved - ?,"
                " cost_reserved = max(0.0, cost_reserved - ?), tokens_used = tokens_used + ?,"
                " cost_used = cost_used + ? WHERE budget = ? AND scope_key = ?"
                " AND window_start = ?",
                (reserved, reserved_cost, tokens, cost, budget, key, start),
            )
            return True

        return await self._db.write(settle, what="budget settle")

    async def usage(self, budget: str | None, key: str | None, limit: int) -> list[BudgetUsage]:
        def usage(conn: sqlite3.Connection) -> list[BudgetUsage]:
            rows = conn.execute(
                "SELECT budget, scope_key, window_start, per, tokens_used, tokens_reserved,"
                " cost_used, cost_reserved, calls, tokens_limit, cost_limit"
                " FROM ik_budget_counters WHERE (?1 IS NULL OR budget = ?1)"
                " AND (?2 IS NULL OR scope_key = ?2)"
                " ORDER BY window_start DESC, budget, scope_key LIMIT ?3",
                (budget, key, limit),
            ).fetchall()
            return [
                _usage(conn, b, k, datetime.fromisoformat(start), Counter(*rest))
                for b, k, start, *rest in rows
            ]

        return await self._db.read(usage, what="budget usage")

    async def set_limit(self, override: LimitOverride) -> LimitOverride:
        def set_limit(conn: sqlite3.Connection) -> LimitOverride:
            now = self._now()
            conn.execute(
                "INSERT INTO ik_budget_limits (budget, scope_key, tokens, cost, actor, note,"
                " set_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (budget, scope_key) DO UPDATE"
                " SET tokens = excluded.tokens, cost = excluded.cost, actor = excluded.actor,"
                " note = excluded.note, set_at = excluded.set_at",
                (
                    override.budget,
                    override.key,
                    override.tokens,
                    override.cost,
                    override.actor,
                    override.note,
                    iso(now),
                ),
            )
            return LimitOverride(
                override.budget,
                override.key,
                override.tokens,
                override.cost,
                override.actor,
                override.note,
                now,
            )

        return await self._db.write(set_limit, what="budget limit")

    async def limits(self, budget: str | None) -> list[LimitOverride]:
        def limits(conn: sqlite3.Connection) -> list[LimitOverride]:
            rows = conn.execute(
                "SELECT budget, scope_key, tokens, cost, actor, note, set_at"
                " FROM ik_budget_limits WHERE ?1 IS NULL OR budget = ?1 ORDER BY budget, scope_key",
                (budget,),
            ).fetchall()
            return [
                LimitOverride(b, k, tokens, cost, actor, note, datetime.fromisoformat(at))
                for b, k, tokens, cost, actor, note, at in rows
            ]

        return await self._db.read(limits, what="budget limits")

    # ---------------------------------------------------------------- providers

    async def acquire_slot(self, request: SlotRequest) -> SlotAnswer:
        provider, holder = request.provider, request.holder

        def acquire(conn: sqlite3.Connection) -> SlotAnswer:
            now = self._now()
            at = iso(now)
            conn.execute(
                "DELETE FROM ik_provider_slots WHERE provider = ? AND expires_at <= ?",
                (provider, at),
            )
            conn.execute(
                "DELETE FROM ik_provider_waiters WHERE provider = ? AND expires_at <= ?",
                (provider, at),
            )
            state = conn.execute(
                "SELECT cooling_until, minute, started FROM ik_provider_state WHERE provider = ?",
                (provider,),
            ).fetchone()
            cooling = (
                None if state is None or state[0] is None else datetime.fromisoformat(state[0])
            )
            minute = iso(minute_of(now))
            started = state[2] if state is not None and state[1] == minute else 0
            holds = conn.execute(
                "SELECT 1 FROM ik_provider_slots WHERE provider = ? AND holder = ?",
                (provider, holder),
            ).fetchone()
            mine = conn.execute(
                "SELECT ticket FROM ik_provider_waiters WHERE provider = ? AND holder = ?",
                (provider, holder),
            ).fetchone()
            (in_use,) = conn.execute(
                "SELECT count(*) FROM ik_provider_slots WHERE provider = ? AND holder <> ?",
                (provider, holder),
            ).fetchone()
            (ahead,) = conn.execute(
                "SELECT count(*) FROM ik_provider_waiters WHERE provider = ?"
                " AND (?2 IS NULL OR ticket < ?2)",
                (provider, None if mine is None else mine[0]),
            ).fetchone()
            answer = slot_answer(
                request,
                now,
                holds=holds is not None,
                in_use=in_use,
                ahead=ahead,
                started=started,
                cooling_until=cooling,
            )
            if answer.granted:
                conn.execute(
                    "INSERT INTO ik_provider_slots (provider, holder, expires_at)"
                    " VALUES (?, ?, ?) ON CONFLICT (provider, holder)"
                    " DO UPDATE SET expires_at = excluded.expires_at",
                    (provider, holder, later(now, request.ttl)),
                )
                conn.execute(
                    "DELETE FROM ik_provider_waiters WHERE provider = ? AND holder = ?",
                    (provider, holder),
                )
                if holds is None:
                    conn.execute(
                        "INSERT INTO ik_provider_state (provider, minute, started, tickets)"
                        " VALUES (?, ?, 1, 0) ON CONFLICT (provider) DO UPDATE SET"
                        " started = CASE WHEN minute = excluded.minute THEN started + 1 ELSE 1 END,"
                        " minute = excluded.minute",
                        (provider, minute),
                    )
                return answer
            until = later(now, answer.wait + WAITER_GRACE)
            if mine is not None:
                conn.execute(
                    "UPDATE ik_provider_waiters SET expires_at = ? WHERE provider = ?"
                    " AND holder = ?",
                    (until, provider, holder),
                )
                return answer
            (ticket,) = conn.execute(
                "INSERT INTO ik_provider_state (provider, started, tickets) VALUES (?, 0, 1)"
                " ON CONFLICT (provider) DO UPDATE SET tickets = tickets + 1 RETURNING tickets",
                (provider,),
            ).fetchone()
            conn.execute(
                "INSERT INTO ik_provider_waiters (provider, holder, ticket, expires_at)"
                " VALUES (?, ?, ?, ?)",
                (provider, holder, ticket, until),
            )
            return answer

        return await self._db.read(lambda conn: _unsynced_write(conn, acquire), what="slot")

    async def release_slot(self, provider: str, holder: str) -> None:
        def release(conn: sqlite3.Connection) -> None:
            for table in ("ik_provider_slots", "ik_provider_waiters"):
                conn.execute(
                    f"DELETE FROM {table} WHERE provider = ? AND holder = ?", (provider, holder)
                )

        await self._db.read(lambda conn: _unsynced_write(conn, release), what="slot release")

    async def cool_down(self, provider: str, seconds: float) -> datetime:
        def cool(conn: sqlite3.Connection) -> datetime:
            until = later(self._now(), seconds)
            (stored,) = conn.execute(
                "INSERT INTO ik_provider_state (provider, cooling_until, started, tickets)"
                " VALUES (?, ?, 0, 0) ON CONFLICT (provider) DO UPDATE SET cooling_until ="
                " CASE WHEN cooling_until IS NULL OR cooling_until < excluded.cooling_until"
                " THEN excluded.cooling_until ELSE cooling_until END RETURNING cooling_until",
                (provider, until),
            ).fetchone()
            return datetime.fromisoformat(stored)

        return await self._db.write(cool, what="provider cool-down")

    async def providers(self) -> list[ProviderStatus]:
        def providers(conn: sqlite3.Connection) -> list[ProviderStatus]:
            now = self._now()
            at, minute = iso(now), iso(minute_of(now))
            rows = conn.execute(
                "SELECT p.provider,"
                " (SELECT count(*) FROM ik_provider_slots s WHERE s.provider = p.provider"
                "  AND s.expires_at > ?1),"
                " (SELECT count(*) FROM ik_provider_waiters w WHERE w.provider = p.provider"
                "  AND w.expires_at > ?1),"
                " CASE WHEN p.minute = ?2 THEN p.started ELSE 0 END,"
                " CASE WHEN p.cooling_until > ?1 THEN p.cooling_until END"
                " FROM ik_provider_state p ORDER BY p.provider",
                (at, minute),
            ).fetchall()
            return [
                ProviderStatus(
                    name, used, waiting, started, None if c is None else datetime.fromisoformat(c)
                )
                for name, used, waiting, started, c in rows
                if used or waiting or started or c
            ]

        return await self._db.read(providers, what="providers")
