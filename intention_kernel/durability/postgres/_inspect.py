"""``StoreInspector`` for PostgreSQL: operator queries, lease state and retention.

A mixin of ``PostgresDurability``. The lease is a row with an owner token and an expiry, so
``lease_info`` reads who holds it and until when without touching it. Retention runs in one
transaction; outbox events are pruned only once the outbox records deliveries.

Uncertain counts include interrupted ``prepared`` receipts: those whose thread has no live lease
row (``expires_at`` past, or ``-infinity`` once released; see ``_ledger.needs_operator``).

Stored documents are parsed here only through the schema's ``json_or_null`` (migration 3): a
corrupt head is reported on its own thread (``ThreadSummary.corrupt``, counted in
``StoreStatus.corrupt_threads``) instead of failing the query for the whole store.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...contracts.inspect import LeaseInfo, PruneReport, SchemaInfo, StoreStatus, ThreadSummary
from .._documents import PRUNED_TURN, head_problem
from ._errors import translated
from ._schema import MIGRATIONS

__all__ = ["PostgresInspection", "awaits_operator", "lease_free", "schema_info_of"]


def lease_free(s: str, alias: str = "r") -> str:
    """SQL: no live holder has the lease of ``alias.thread_id`` (released or expired)."""
    return (
        f"NOT EXISTS (SELECT 1 FROM {s}.leases l WHERE l.thread_id = {alias}.thread_id"
        " AND l.expires_at > clock_timestamp())"
    )


def awaits_operator(s: str, alias: str = "r") -> str:
    """SQL: the receipt ``alias`` is uncertain, or prepared by a turn that is not running."""
    return (
        f"({alias}.status = 'uncertain' OR ({alias}.status = 'prepared'"
        f" AND {lease_free(s, alias)}))"
    )


def _pending(version: int) -> tuple[str, ...]:
    return tuple(f"{n}: schema version {n}" for n in range(version + 1, len(MIGRATIONS) + 1))


async def schema_info_of(conn: Any, schema: str) -> SchemaInfo:
    """The version of ``schema`` read without migrating (``migrate --dry-run``)."""
    s = f'"{schema}"'
    with translated():
        exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f"{s}.schema_migrations")
        version = (
            await conn.fetchval(f"SELECT coalesce(max(version), 0) FROM {s}.schema_migrations")
            if exists
            else 0
        )
    return SchemaInfo(version=int(version), supported=len(MIGRATIONS), pending=_pending(version))


class PostgresInspection:
    """The operator hooks of the engine (arguments already checked)."""

    schema: str

    if TYPE_CHECKING:
        _pool: Any

    @property
    def _s(self) -> str:
        return f'"{self.schema}"'

    async def _has_deliveries(self, conn: Any) -> bool:
        found = await conn.fetchval(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = $1"
            " AND table_name = 'outbox' AND column_name IN ('delivered_at', 'dead')",
            self.schema,
        )
        return int(found) == 2

    async def storage_list_threads(
        self, prefix: str | None, after: str | None, limit: int
    ) -> list[ThreadSummary]:
        s = self._s
        with translated():
            rows = await self._pool.fetch(
                f"""
                WITH ids AS (
                    SELECT thread_id FROM {s}.heads UNION SELECT thread_id FROM {s}.receipts
                ), chosen AS (
                    SELECT thread_id FROM ids WHERE thread_id > $1
                      AND ($2::text IS NULL OR starts_with(thread_id, $2))
                    ORDER BY thread_id LIMIT $3
                )
                SELECT c.thread_id, h.revision, h.turn_id,
                       head.doc #>> '{{checkpoint,agent_fingerprint}}' AS fingerprint,
                       head.found, head.doc IS NOT NULL AS valid,
                       (SELECT count(*) FROM {s}.turns t WHERE t.thread_id = c.thread_id
                          AND t.result <> '{PRUNED_TURN}')
                           AS turns,
                       (SELECT max(committed_at) FROM {s}.turns t
                         WHERE t.thread_id = c.thread_id) AS last_commit_at,
                       (SELECT count(*) FROM {s}.receipts r
                         WHERE r.thread_id = c.thread_id AND {awaits_operator(s)})
                           AS uncertain
                  FROM chosen c LEFT JOIN {s}.heads h ON h.thread_id = c.thread_id
                  LEFT JOIN LATERAL (
                      SELECT true AS found, {s}.json_or_null(t.result) AS doc FROM {s}.turns t
                       WHERE t.thread_id = h.thread_id AND t.turn_id = h.turn_id
                  ) head ON true
                 ORDER BY c.thread_id
                """,
                after or "",
                prefix,
                limit,
            )
        return [
            ThreadSummary(
                thread_id=r["thread_id"],
                revision=0 if r["revision"] is None else int(r["revision"]),
                head_turn_id=r["turn_id"],
                fingerprint=r["fingerprint"],
                turns=int(r["turns"]),
                last_commit_at=r["last_commit_at"],
                uncertain_receipts=int(r["uncertain"]),
                corrupt=None
                if r["turn_id"] is None
                else head_problem(
                    missing=r["found"] is None,
                    valid=bool(r["valid"]),
                    fingerprint=r["fingerprint"],
                ),
            )
            for r in rows
        ]

    async def storage_status(self) -> StoreStatus:
        s = self._s
        with translated():
            async with self._pool.acquire() as conn:
                info = await schema_info_of(conn, self.schema)
                row = await conn.fetchrow(
                    f"""SELECT
                      (SELECT count(*) FROM (SELECT thread_id FROM {s}.heads
                         UNION SELECT thread_id FROM {s}.receipts) ids) AS threads,
                      (SELECT count(*) FROM {s}.turns WHERE result <> '{PRUNED_TURN}') AS turns,
                      (SELECT count(*) FROM {s}.receipts WHERE status = 'uncertain')
                      + (SELECT count(*) FROM {s}.receipts r
                          WHERE r.status = 'prepared' AND {lease_free(s)}) AS uncertain,
                      (SELECT count(*) FROM {s}.heads h LEFT JOIN {s}.turns t
                          ON t.thread_id = h.thread_id AND t.turn_id = h.turn_id
                        WHERE t.result IS NULL OR
                          {s}.json_or_null(t.result) #>> '{{checkpoint,agent_fingerprint}}'
                            IS NULL) AS corrupt"""
                )
                if await self._has_deliveries(conn):
                    undelivered = await conn.fetchval(
                        f"SELECT count(*) FROM {s}.outbox WHERE delivered_at IS NULL AND NOT dead"
                    )
                    dead = await conn.fetchval(f"SELECT count(*) FROM {s}.outbox WHERE dead")
                else:
                    undelivered = await conn.fetchval(f"SELECT count(*) FROM {s}.outbox")
                    dead = 0
        return StoreStatus(
            schema_version=info.version,
            threads=int(row["threads"]),
            turns=int(row["turns"]),
            uncertain_receipts=int(row["uncertain"]),
            undelivered_events=int(undelivered),
            dead_events=int(dead),
            backend="postgresql",
            corrupt_threads=int(row["corrupt"]),
        )

    async def storage_schema_info(self) -> SchemaInfo:
        async with self._pool.acquire() as conn:
            return await schema_info_of(conn, self.schema)

    async def storage_lease_info(self, thread_id: str) -> LeaseInfo:
        with translated():
            row = await self._pool.fetchrow(
                f"SELECT owner, epoch, expires_at, expires_at > now() AS held"
                f" FROM {self._s}.leases WHERE thread_id = $1",
                thread_id,
            )
        if row is None:
            return LeaseInfo(thread_id=thread_id, held=False, mechanism="lease row")
        held = bool(row["held"])
        expires: datetime | None = row["expires_at"]
        return LeaseInfo(
            thread_id=thread_id,
            held=held,
            epoch=int(row["epoch"]),
            holder=row["owner"] if held else None,
            expires_at=expires if held else None,
            mechanism="lease row with expiry, renewed by the holder's heartbeat",
        )

    async def storage_prune_records(self, older_than: datetime, dry_run: bool) -> PruneReport:
        s = self._s
        report = PruneReport(cutoff=older_than, dry_run=dry_run)
        with translated():
            async with self._pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(
                    f"""SELECT t.thread_id, t.turn_id,
                           EXISTS (SELECT 1 FROM {s}.heads h WHERE h.thread_id = t.thread_id
                                     AND h.turn_id = t.turn_id)
                           OR EXISTS (SELECT 1 FROM {s}.receipts r
                                       WHERE r.thread_id = t.thread_id
                                         AND r.status IN ('uncertain', 'prepared')
                                         AND coalesce(
                                             {s}.json_or_null(r.receipt) ->> 'turn_id',
                                             t.turn_id) = t.turn_id)
                             AS live
                          FROM {s}.turns t WHERE t.committed_at < $1 AND t.result <> $2
                         ORDER BY t.committed_at FOR UPDATE OF t""",
                    older_than,
                    PRUNED_TURN,
                )
                for r in rows:
                    if r["live"]:
                        report.kept_turns += 1
                    else:
                        report.turns.append((r["thread_id"], r["turn_id"]))
                if await self._has_deliveries(conn):
                    report.events = [
                        int(p)
                        for p in await conn.fetchval(
                            f"SELECT coalesce(array_agg(position ORDER BY position), '{{}}')"
                            f" FROM {s}.outbox WHERE delivered_at < $1 AND NOT dead",
                            older_than,
                        )
                    ]
                if not dry_run:
                    await conn.execute(
                        f"UPDATE {s}.turns t SET result = $3"
                        " FROM unnest($1::text[], $2::text[]) AS d(thread_id, turn_id)"
                        " WHERE t.thread_id = d.thread_id AND t.turn_id = d.turn_id",
                        [t for t, _ in report.turns],
                        [u for _, u in report.turns],
                        PRUNED_TURN,
                    )
                    await conn.execute(
                        f"DELETE FROM {s}.outbox WHERE position = ANY($1::bigint[])",
                        report.events,
                    )
        return report
