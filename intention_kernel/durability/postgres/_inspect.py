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
from typing import Any

from ...contracts.inspect import LeaseInfo, PruneReport, SchemaInfo, StoreStatus, ThreadSummary
from .._documents import PRUNED_TURN, head_problem
from ..storage import ThreadQuery
from ._connection import PgConnection
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


def _corrupt(s: str) -> str:
    """SQL, on a head row ``h`` (``NULL`` for a thread without one): its document cannot be
    read back (``head_problem``). Decodes the document: a scalar subquery, so it runs per head
    in id order until the page is full, never as a join over every turn."""
    return (
        f"(h.thread_id IS NOT NULL AND (SELECT {s}.json_or_null(t.result)"
        " #>> '{checkpoint,agent_fingerprint}' FROM "
        f"{s}.turns t WHERE t.thread_id = h.thread_id AND t.turn_id = h.turn_id) IS NULL)"
    )


def _head_filters(s: str, query: ThreadQuery) -> str:
    """SQL conditions on a head row ``h`` (``NULL`` columns for a thread without one);
    ``$4`` is the ``fingerprint_not_in`` array."""
    clauses = []
    if query.pending is not None:
        clauses.append(f"h.pending_interaction IS {'NOT ' if query.pending else ''}NULL")
    if query.corrupt is not None:
        clauses.append(f"{'' if query.corrupt else 'NOT '}{_corrupt(s)}")
    if query.fingerprint_not_in is not None:
        clauses.append(
            "h.thread_id IS NOT NULL"
            " AND (h.agent_fingerprint IS NULL OR h.agent_fingerprint <> ALL($4::text[]))"
        )
    return "".join(f" AND {c}" for c in clauses)


def _arguments(query: ThreadQuery) -> list[Any]:
    args: list[Any] = [query.after or "", query.prefix, query.limit]
    if query.fingerprint_not_in is not None:
        args.append(sorted(query.fingerprint_not_in))
    return args


def _chosen(s: str, query: ThreadQuery) -> str:
    """SQL: the page's thread ids in id order. ``$1`` after, ``$2`` prefix, ``$3`` limit.

    Each part walks an index in id order and stops at the page size: the heads' primary key
    (or the partial index of pending interactions), the receipts' primary key for threads
    with receipts and no head yet, or the partial index of open receipts for ``uncertain``.
    """
    ids = "{0}.thread_id > $1 AND ($2::text IS NULL OR starts_with({0}.thread_id, $2))"
    heads = _head_filters(s, query)
    open_receipts = (
        f"EXISTS (SELECT 1 FROM {s}.receipts u WHERE u.thread_id = {{0}}.thread_id"
        f" AND {awaits_operator(s, 'u')})"
    )
    if query.uncertain:
        return (
            f"SELECT o.thread_id FROM (SELECT DISTINCT r.thread_id FROM {s}.receipts r"
            f" WHERE r.status IN ('uncertain', 'prepared') AND {ids.format('r')}"
            f" AND {awaits_operator(s)}) o"
            f" LEFT JOIN {s}.heads h ON h.thread_id = o.thread_id WHERE true{heads}"
            " ORDER BY o.thread_id LIMIT $3"
        )
    uncertain = "" if query.uncertain is None else f" AND NOT {open_receipts}"
    heads_page = (
        f"SELECT h.thread_id FROM {s}.heads h WHERE {ids.format('h')}"
        f"{uncertain.format('h')}{heads} ORDER BY h.thread_id LIMIT $3"
    )
    if query.pending or query.corrupt or query.fingerprint_not_in is not None:
        return heads_page
    # Threads with receipts and no head yet (a turn that ran effects, then failed), looked for
    # only up to the last id of a full heads page: the walk over receipts stays that short.
    # The head lookup is a scalar subquery so it stays an index probe per receipt.
    return (
        f"WITH page AS ({heads_page}),"
        " upto AS (SELECT CASE WHEN count(*) = $3 THEN max(thread_id) END AS id FROM page)"
        " SELECT thread_id FROM (SELECT thread_id FROM page UNION ALL"
        f" (SELECT DISTINCT r.thread_id FROM {s}.receipts r, upto"
        f" WHERE {ids.format('r')}{uncertain.format('r')}"
        " AND (upto.id IS NULL OR r.thread_id <= upto.id)"
        f" AND (SELECT h.thread_id FROM {s}.heads h WHERE h.thread_id = r.thread_id) IS NULL"
        " ORDER BY r.thread_id LIMIT $3)) ids ORDER BY thread_id LIMIT $3"
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
    """``InspectionStorage`` on PostgreSQL (the facade has checked the arguments). Listings and
    counts read ``reads`` (a hot standby's pool, may lag); the schema version (what a migration
    just wrote), the lease (live state) and retention, the primary."""

    def __init__(self, db: PgConnection, reads: PgConnection | None = None) -> None:
        self._db = db
        self._reads = db if reads is None else reads
        self.schema = db.schema

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

    async def list_threads(self, query: ThreadQuery) -> list[ThreadSummary]:
        s = self._s
        with translated():
            async with self._reads.lanes.connection() as conn:
                rows = await conn.fetch(
                    f"""
                WITH chosen AS ({_chosen(s, query)})
                SELECT c.thread_id, h.revision, h.turn_id, h.pending_interaction,
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
                    *_arguments(query),
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
                pending_interaction=r["pending_interaction"],
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

    async def status(self) -> StoreStatus:
        s = self._s
        with translated():
            async with self._reads.lanes.connection() as conn:
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

    async def schema_info(self) -> SchemaInfo:
        async with self._db.lanes.connection() as conn:
            return await schema_info_of(conn, self.schema)

    async def lease_info(self, thread_id: str) -> LeaseInfo:
        with translated():
            async with self._db.lanes.connection() as conn:
                row = await conn.fetchrow(
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

    async def prune_records(self, older_than: datetime, dry_run: bool) -> PruneReport:
        s = self._s
        report = PruneReport(cutoff=older_than, dry_run=dry_run)
        with translated():
            async with self._db.lanes.connection() as conn, conn.transaction():
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
