"""``PostgresFlow``: the ``FlowStorage`` role of the PostgreSQL store (tables of migration 8).

A reservation and a slot decision are each one call of a schema function (``_flow_schema``):
one short transaction in one round trip, on the database clock. Reservations commit durably
(``synchronous_commit`` on inside ``budget_reserve``); slot grants, queue places and
cool-downs need not (after a crash they are simply asked for again).
"""

from __future__ import annotations

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
from .._flow_rules import BUSY_WAIT, WAITER_GRACE, limits_in_force
from ._connection import PgConnection

__all__ = ["PostgresFlow"]


class PostgresFlow:
    """``FlowStorage`` over the ``budget_*`` and ``provider_*`` tables of one schema."""

    def __init__(self, db: PgConnection) -> None:
        self._db = db
        s = f'"{db.schema}"'
        self._reserve = f"SELECT * FROM {s}.budget_reserve($1, $2, $3, $4, $5, $6, $7, $8)"
        self._settle = (
            f"WITH r AS (DELETE FROM {s}.budget_reservations WHERE id = $1 RETURNING *)"
            f" UPDATE {s}.budget_counters AS c SET tokens_reserved = c.tokens_reserved - r.tokens,"
            " cost_reserved = greatest(0, c.cost_reserved - r.cost),"
            " tokens_used = c.tokens_used + $2, cost_used = c.cost_used + $3 FROM r"
            " WHERE c.budget = r.budget AND c.scope_key = r.scope_key"
            " AND c.window_start = r.window_start"
        )
        self._usage = (
            "SELECT budget, scope_key, window_start, per, tokens_used, tokens_reserved,"
            f" cost_used, cost_reserved, calls, tokens_limit, cost_limit FROM {s}.budget_counters"
            " WHERE ($1::text IS NULL OR budget = $1) AND ($2::text IS NULL OR scope_key = $2)"
            " ORDER BY window_start DESC, budget, scope_key LIMIT $3"
        )
        self._limits = (
            f"SELECT budget, scope_key, tokens, cost, actor, note, set_at FROM {s}.budget_limits"
            " WHERE $1::text IS NULL OR budget = $1 ORDER BY budget, scope_key"
        )
        self._set_limit = (
            f"INSERT INTO {s}.budget_limits AS l (budget, scope_key, tokens, cost, actor, note)"
            " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (budget, scope_key) DO UPDATE"
            " SET tokens = excluded.tokens, cost = excluded.cost, actor = excluded.actor,"
            " note = excluded.note, set_at = now() RETURNING set_at"
        )
        self._acquire = f"SELECT * FROM {s}.slot_acquire($1, $2, $3, $4, $5, $6, $7)"
        self._release = (
            f"WITH a AS (DELETE FROM {s}.provider_slots WHERE provider = $1 AND holder = $2)"
            f" DELETE FROM {s}.provider_waiters WHERE provider = $1 AND holder = $2"
        )
        self._cool = (
            f"INSERT INTO {s}.provider_state AS n (provider, cooling_until)"
            " VALUES ($1, clock_timestamp() + make_interval(secs => $2))"
            " ON CONFLICT (provider) DO UPDATE"
            " SET cooling_until = greatest(n.cooling_until, excluded.cooling_until)"
            " RETURNING cooling_until"
        )
        self._providers = (
            "SELECT p.provider,"
            f" (SELECT count(*) FROM {s}.provider_slots AS x WHERE x.provider = p.provider"
            "  AND x.expires_at > clock_timestamp()) AS in_use,"
            f" (SELECT count(*) FROM {s}.provider_waiters AS w WHERE w.provider = p.provider"
            "  AND w.expires_at > clock_timestamp()) AS waiting,"
            " CASE WHEN p.minute = date_trunc('minute', clock_timestamp()) THEN p.started"
            "  ELSE 0 END AS started,"
            " CASE WHEN p.cooling_until > clock_timestamp() THEN p.cooling_until END AS cooling"
            f" FROM {s}.provider_state AS p ORDER BY p.provider"
        )

    # ---------------------------------------------------------------- budgets

    async def reserve(
        self, line: BudgetLine, tokens: int, cost: float, reservation_id: str
    ) -> Reserved:
        row = await self._db.fetchrow(
            self._reserve,
            line.budget,
            line.key,
            line.per,
            line.tokens,
            line.cost,
            tokens,
            cost,
            reservation_id,
        )
        start = row["window_start"]
        usage = BudgetUsage(
            line.budget,
            line.key,
            line.per,
            start,
            window_bounds(line.per, start)[1],
            row["tokens_used"],
            row["tokens_reserved"],
            row["cost_used"],
            row["cost_reserved"],
            row["calls"],
            row["tokens_limit"],
            row["cost_limit"],
            row["overridden"],
        )
        if not row["granted"]:
            return Reserved(None, usage)
        reservation = Reservation(reservation_id, line.budget, line.key, start, tokens, cost)
        return Reserved(reservation, usage)

    async def settle(self, reservation_id: str, tokens: int, cost: float) -> bool:
        return await self._db.execute_status(self._settle, reservation_id, tokens, cost) > 0

    async def usage(self, budget: str | None, key: str | None, limit: int) -> list[BudgetUsage]:
        rows = await self._db.fetch(self._usage, budget, key, limit)
        overrides: dict[str, dict[str, tuple[Any, Any]]] = {}
        for found in await self._db.fetch(self._limits, budget):
            overrides.setdefault(found["budget"], {})[found["scope_key"]] = (
                found["tokens"],
                found["cost"],
            )
        listed = []
        for row in rows:
            line = BudgetLine(
                row["budget"], row["scope_key"], row["per"], row["tokens_limit"], row["cost_limit"]
            )
            tokens, cost, overridden = limits_in_force(line, overrides.get(line.budget, {}))
            start = row["window_start"]
            listed.append(
                BudgetUsage(
                    line.budget,
                    line.key,
                    line.per,
                    start,
                    window_bounds(line.per, start)[1],
                    row["tokens_used"],
                    row["tokens_reserved"],
                    row["cost_used"],
                    row["cost_reserved"],
                    row["calls"],
                    tokens,
                    cost,
                    overridden,
                )
            )
        return listed

    async def set_limit(self, override: LimitOverride) -> LimitOverride:
        row = await self._db.fetchrow(
            self._set_limit,
            override.budget,
            override.key,
            override.tokens,
            override.cost,
            override.actor,
            override.note,
        )
        return LimitOverride(
            override.budget,
            override.key,
            override.tokens,
            override.cost,
            override.actor,
            override.note,
            row["set_at"],
        )

    async def limits(self, budget: str | None) -> list[LimitOverride]:
        rows = await self._db.fetch(self._limits, budget)
        return [
            LimitOverride(
                r["budget"],
                r["scope_key"],
                r["tokens"],
                r["cost"],
                r["actor"],
                r["note"],
                r["set_at"],
            )
            for r in rows
        ]

    # ---------------------------------------------------------------- providers

    async def acquire_slot(self, request: SlotRequest) -> SlotAnswer:
        row = await self._db.fetchrow(
            self._acquire,
            request.provider,
            request.holder,
            request.concurrent,
            request.per_minute,
            request.ttl,
            BUSY_WAIT,
            WAITER_GRACE,
        )
        return SlotAnswer(
            row["granted"],
            row["reason"],
            float(row["wait"]),
            row["position"],
            row["cooling_until"],
        )

    async def release_slot(self, provider: str, holder: str) -> None:
        await self._db.execute(self._release, provider, holder)

    async def cool_down(self, provider: str, seconds: float) -> datetime:
        row = await self._db.fetchrow(self._cool, provider, seconds)
        until: datetime = row["cooling_until"]
        return until

    async def providers(self) -> list[ProviderStatus]:
        rows = await self._db.fetch(self._providers)
        return [
            ProviderStatus(r["provider"], r["in_use"], r["waiting"], r["started"], r["cooling"])
            for r in rows
            if r["in_use"] or r["waiting"] or r["started"] or r["cooling"]
        ]
