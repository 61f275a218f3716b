"""``status``, ``migrate`` and ``prune``: the store's schema, size and retention."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from ..contracts.inspect import SchemaInfo
from ._common import (
    CliError,
    ExitCode,
    JsonOpt,
    StoreOpt,
    emit,
    inspector,
    open_store,
    out,
    run,
    sqlite_path,
    store_target,
)

__all__ = ["parse_duration", "register"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def register(app: typer.Typer) -> None:
    app.command("status")(status)
    app.command("migrate")(migrate)
    app.command("prune")(prune)


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w``."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", text)
    if match is None:
        raise CliError("INVALID_DURATION", f"{text!r} is not a duration like 30d, 12h or 90m")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


async def _postgres_schema(url: str, schema: str | None) -> SchemaInfo:
    """Read a PostgreSQL schema's version without verifying or migrating it."""
    from ..durability.postgres import _inspect as pg_inspect
    from ..durability.postgres import _schema as pg_schema
    from ..durability.postgres._errors import translated

    name = pg_schema.check_schema_name(schema or pg_schema.DEFAULT_SCHEMA)
    with translated():
        import asyncpg

        conn = await asyncpg.connect(url)
    try:
        return await pg_inspect.schema_info_of(conn, name)
    finally:
        await conn.close()


def status(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Schema version and counts: threads, turns, uncertain receipts (interrupted prepared ones
    included), undelivered/dead events."""

    async def body() -> Any:
        async with open_store(store) as opened:
            return await inspector(opened).store_status()

    data = run(as_json, body)

    def human() -> None:
        out.print(f"backend            {data.backend}")
        out.print(f"schema version     {data.schema_version}")
        out.print(f"threads            {data.threads}")
        out.print(f"turns              {data.turns}")
        out.print(f"uncertain receipts {data.uncertain_receipts}")
        out.print(f"undelivered events {data.undelivered_events}")
        out.print(f"dead events        {data.dead_events}")

    emit(as_json, data, human)


def migrate(
    store: StoreOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would run.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Bring the store's schema up to date (creates a new SQLite file)."""

    async def body() -> dict[str, Any]:
        url, options = store_target(store)
        path = sqlite_path(url)
        if path is not None:
            from ..durability.sqlite._inspect import read_schema_info

            before = read_schema_info(path)
        else:
            before = await _postgres_schema(url, options.get("schema"))
        if before.version > before.supported:
            raise CliError(
                "STORE_SCHEMA_TOO_NEW",
                f"the store has schema {before.version}; this version knows {before.supported}",
                ExitCode.STORE,
            )
        applied: list[str] = []
        if not dry_run and before.pending:
            async with open_store(store, create=True) as opened:  # opening migrates
                after = await inspector(opened).schema_info()
            applied = list(before.pending)
            before_version, version = before.version, after.version
        else:
            before_version = version = before.version
        return {
            "dry_run": dry_run,
            "version_before": before_version,
            "version": version,
            "supported": before.supported,
            "pending": list(before.pending) if dry_run else [],
            "applied": applied,
        }

    data = run(as_json, body)

    def human() -> None:
        if dry_run:
            if data["pending"]:
                out.print(f"would apply {len(data['pending'])} migration(s):")
                for name in data["pending"]:
                    out.print(f"  {name}", markup=False)
            else:
                out.print(f"schema is up to date (version {data['version']})")
        elif data["applied"]:
            out.print(f"migrated from version {data['version_before']} to {data['version']}")
        else:
            out.print(f"schema is up to date (version {data['version']})")

    emit(as_json, data, human)


def prune(
    older_than: Annotated[str, typer.Option("--older-than", help="e.g. 30d, 12h")],
    store: StoreOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would go.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete old turn records and delivered events; live obligations always stay."""

    async def body() -> Any:
        cutoff = datetime.now(UTC) - parse_duration(older_than)
        async with open_store(store) as opened:
            return await inspector(opened).prune_records(older_than=cutoff, dry_run=dry_run)

    report = run(as_json, body)

    def human() -> None:
        verb = "would remove" if dry_run else "removed"
        out.print(
            f"{verb} {len(report.turns)} turn record(s) and {len(report.events)} delivered"
            f" event(s) older than {report.cutoff.isoformat(timespec='seconds')};"
            f" kept {report.kept_turns} old turn(s) that hold live obligations"
        )
        for thread_id, turn_id in report.turns[:20]:
            out.print(f"  turn {thread_id}/{turn_id}", markup=False)

    emit(as_json, report, human)
