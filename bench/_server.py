"""What a PostgreSQL benchmark cell cost, read from the server and from ``/proc``.

``Probe.snapshot()`` reads, before and after a cell:

- ``pg_stat_database`` of the cell's database: ``xact_commit`` (every committed transaction,
  read-only ones included) and ``xact_rollback``;
- ``pg_stat_wal`` (the whole cluster): ``wal_records``, ``wal_fpi``, ``wal_bytes``, ``wal_sync``
  (WAL fsyncs, by backends at commit and by the WAL writer);
- ``pg_stat_statements`` when the server preloads it, summed over the cell's database:
  ``calls`` (statements, ``BEGIN``/``COMMIT`` included) and the WAL they wrote;
- the flushed WAL position, so that ``pg_walinspect`` (when installed) can read the WAL the cell
  wrote: the records that touch the cell's database (``db_wal_*``: not disturbed by other
  databases), the commit records of their transactions (``commit_records``: write transactions,
  synchronous or not) and all commit records (``commit_records_all``);
- server CPU of the whole cluster: ``utime + stime`` of the postmaster and every live child,
  plus the postmaster's ``cutime + cstime`` (backends that exited, reaped by the postmaster),
  from ``/proc`` (``server_cpu_all``: it includes anything else the server did meanwhile);
- server CPU of the cell (``CpuSampler``): the backends connected to the cell's database and
  the WAL writer, checkpointer and background writer, sampled from ``/proc`` during the cell.

Cumulative statistics of a backend reach the shared counters when it ends a transaction at most
once a second, and when it exits; so the closing snapshot of a cell is taken after the cell's
connections have gone (``wait_idle``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from _measure import cpu_seconds, per_turn, read_proc_stat


def server_cpu_seconds(postmaster: int) -> float | None:
    """CPU seconds used so far by the server: postmaster, its live children, reaped children."""
    own = read_proc_stat(postmaster)
    if own is None:
        return None
    ticks = own.ticks + own.reaped_ticks
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = read_proc_stat(int(entry.name))
        if stat is not None and stat.ppid == postmaster:
            ticks += stat.ticks
    return cpu_seconds(ticks)


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


AUXILIARY = ("walwriter", "checkpointer", "background writer")


class CpuSampler:
    """CPU of the backends serving one database, plus the WAL writer, checkpointer and
    background writer, read from ``/proc`` every 50 ms on a thread (a backend that exits
    during the cell keeps its last reading). ``stop`` returns the seconds used between
    ``start`` and ``stop``."""

    def __init__(self, postmaster: int, database: str) -> None:
        self.postmaster = postmaster
        self.marker = f" {database} "
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self, initial: bool) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            stat = read_proc_stat(pid)
            if stat is None or stat.ppid != self.postmaster:
                continue
            title = _title(pid)
            if self.marker not in title and not any(a in title for a in AUXILIARY):
                continue
            ticks = stat.ticks
            if initial:
                self.first[pid] = ticks
            self.last[pid] = max(ticks, self.last.get(pid, 0))

    def _loop(self) -> None:
        while not self.done.wait(0.05):
            self._sample(False)

    def start(self) -> CpuSampler:
        self._sample(True)
        self.thread.start()
        return self

    def stop(self) -> float:
        self._sample(False)
        self.done.set()
        self.thread.join()
        return cpu_seconds(sum(t - self.first.get(pid, 0) for pid, t in self.last.items()))


@dataclass
class Snapshot:
    at: float
    database: dict[str, int]
    wal: dict[str, int]
    lsn: str
    statements: dict[str, int] | None
    server_cpu: float | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Probe:
    """A monitoring connection (in another database than the cells', so its own statements do
    not count) and what the server offers."""

    conn: Any
    postmaster: int | None
    statements: bool
    walinspect: bool

    @classmethod
    async def open(cls, dsn: str) -> Probe:
        conn = await asyncpg.connect(dsn)
        loaded = str(await conn.fetchval("SHOW shared_preload_libraries"))
        statements = False
        if "pg_stat_statements" in loaded:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            statements = True
        walinspect = False
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            walinspect = True
        except asyncpg.PostgresError:
            pass
        backend = int(await conn.fetchval("SELECT pg_backend_pid()"))
        stat = read_proc_stat(backend)
        postmaster = stat.ppid if stat is not None else None
        return cls(conn, postmaster, statements, walinspect)

    async def close(self) -> None:
        await self.conn.close()

    async def snapshot(self, database: str) -> Snapshot:
        db = await self.conn.fetchrow(
            "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1", database
        )
        wal = await self.conn.fetchrow(
            "SELECT wal_records, wal_fpi, wal_bytes::bigint AS wal_bytes, wal_sync, wal_write"
            " FROM pg_stat_wal"
        )
        lsn = str(await self.conn.fetchval("SELECT pg_current_wal_flush_lsn()::text"))
        statements = None
        if self.statements:
            row = await self.conn.fetchrow(
                "SELECT coalesce(sum(calls), 0)::bigint AS calls,"
                " coalesce(sum(wal_records), 0)::bigint AS wal_records,"
                " coalesce(sum(wal_fpi), 0)::bigint AS wal_fpi,"
                " coalesce(sum(wal_bytes), 0)::bigint AS wal_bytes"
                " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
                " WHERE d.datname = $1",
                database,
            )
            statements = dict(row)
        cpu = server_cpu_seconds(self.postmaster) if self.postmaster else None
        return Snapshot(time.monotonic(), dict(db), dict(wal), lsn, statements, cpu)

    async def database_wal(self, start: str, end: str, database: str) -> dict[str, int] | None:
        """WAL records between two positions that touch the database's relations, their bytes
        and full-page images, and the commit records of the transactions that wrote them."""
        if not self.walinspect:
            return None
        if start == end:
            return {"records": 0, "bytes": 0, "fpi": 0, "commits": 0}
        oid = await self.conn.fetchval("SELECT oid FROM pg_database WHERE datname = $1", database)
        try:
            row = await self.conn.fetchrow(
                "WITH x AS (SELECT xid::text::bigint AS xid,"
                " count(*) FILTER (WHERE block_ref LIKE $3) AS records,"
                " coalesce(sum(record_length) FILTER (WHERE block_ref LIKE $3), 0) AS bytes,"
                " count(*) FILTER (WHERE block_ref LIKE $3 AND fpi_length > 0) AS fpi,"
                " bool_or(resource_manager = 'Transaction' AND record_type LIKE 'COMMIT%')"
                "  AS committed"
                " FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)"
                " GROUP BY 1)"
                " SELECT coalesce(sum(records), 0)::bigint AS records,"
                " coalesce(sum(bytes), 0)::bigint AS bytes, coalesce(sum(fpi), 0)::bigint AS fpi,"
                " count(*) FILTER (WHERE committed AND records > 0 AND xid <> 0) AS commits"
                " FROM x",
                start,
                end,
                f"%/{oid}/%",
            )
        except asyncpg.PostgresError:
            return None
        return {k: int(v) for k, v in dict(row).items()}

    async def commit_records(self, start: str, end: str) -> int | None:
        """Commit records written between two WAL positions (the whole cluster)."""
        if not self.walinspect:
            return None
        if start == end:
            return 0
        try:
            found = await self.conn.fetchval(
                "SELECT coalesce(sum(count), 0)"
                " FROM pg_get_wal_stats($1::text::pg_lsn, $2::text::pg_lsn, true)"
                " WHERE \"resource_manager/record_type\" LIKE 'Transaction/COMMIT%'",
                start,
                end,
            )
        except asyncpg.PostgresError:
            return None
        return int(found)

    async def wait_idle(self, databases: list[str], within: float = 10.0) -> None:
        """Wait until no other connection is open to these databases (their statistics are
        flushed when they exit)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            busy = await self.conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = any($1::text[]) AND pid <> pg_backend_pid()",
                databases,
            )
            if not busy:
                return
            await asyncio.sleep(0.05)

    def sampler(self, database: str) -> CpuSampler | None:
        return CpuSampler(self.postmaster, database).start() if self.postmaster else None

    async def delta(
        self,
        before: Snapshot,
        after: Snapshot,
        turns: int,
        cell_cpu: float | None = None,
        database: str | None = None,
    ) -> dict[str, Any]:
        """Per-turn figures between two snapshots; ``cell_cpu`` from a ``CpuSampler``."""

        def per(value: float | None) -> float | None:
            return per_turn(value, turns)

        out: dict[str, Any] = {
            "xact_commit_per_turn": per(
                after.database["xact_commit"] - before.database["xact_commit"]
            ),
            "xact_rollback_per_turn": per(
                after.database["xact_rollback"] - before.database["xact_rollback"]
            ),
        }
        for key in ("wal_records", "wal_fpi", "wal_bytes", "wal_sync", "wal_write"):
            out[f"{key}_per_turn"] = per(after.wal[key] - before.wal[key])
        commits = await self.commit_records(before.lsn, after.lsn)
        out["commit_records_all_per_turn"] = per(commits)
        mine = await self.database_wal(before.lsn, after.lsn, database) if database else None
        if mine is not None:
            out["commit_records_per_turn"] = per(mine["commits"])
            out["db_wal_records_per_turn"] = per(mine["records"])
            out["db_wal_bytes_per_turn"] = per(mine["bytes"])
            out["db_wal_fpi_per_turn"] = per(mine["fpi"])
        if before.statements is not None and after.statements is not None:
            diff = {k: after.statements[k] - before.statements[k] for k in after.statements}
            out["statements_per_turn"] = per(diff["calls"])
            out["statement_wal_bytes_per_turn"] = per(diff["wal_bytes"])
            out["statement_wal_fpi_per_turn"] = per(diff["wal_fpi"])
        if before.server_cpu is not None and after.server_cpu is not None:
            cpu = after.server_cpu - before.server_cpu
            out["server_cpu_all_us_per_turn"] = per(cpu * 1e6)
        out["server_cpu_us_per_turn"] = per(None if cell_cpu is None else cell_cpu * 1e6)
        return out
