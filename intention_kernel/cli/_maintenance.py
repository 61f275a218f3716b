"""``status``, ``migrate`` and ``prune``: the store's schema, size and retention."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from ..contracts.errors import ConfigurationError
from ..durability.factory import read_schema_info
from ._common import (
    CliError,
    ExitCode,
    JsonOpt,
    OlderThanOpt,
    StoreOpt,
    emit,
    inspector,
    open_store,
    out,
    parse_duration,
    print_fields,
    run,
    store_location,
    to_jsonable,
)
from ._flow_status import flow_status, print_flow_status

__all__ = ["register"]

_LISTED = 20
"""Turns ``prune`` names one by one; the rest are counted."""


def register(app: typer.Typer) -> None:
    app.command("status")(status)
    app.command("migrate")(migrate)
    app.command("prune")(prune)


def status(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Schema version and counts: threads, turns, uncertain receipts (interrupted prepared ones
    included), undelivered/dead events; budgets (the exhausted and the most used lines) and
    providers cooling down."""

    async def body() -> tuple[Any, dict[str, Any] | None]:
        async with open_store(store) as opened:
            return await inspector(opened).store_status(), await flow_status(opened)

    data, flow = run(as_json, body)

    def human() -> None:
        print_fields(
            [
                ("backend", data.backend),
                ("schema version", data.schema_version),
                ("threads", data.threads),
                ("turns", data.turns),
                ("uncertain receipts", data.uncertain_receipts),
                ("undelivered events", data.undelivered_events),
                ("dead events", data.dead_events),
                ("corrupt threads", data.corrupt_threads),
            ]
        )
        print_flow_status(flow)

    emit(as_json, {**to_jsonable(data), "budgets": flow}, human)


def migrate(
    store: StoreOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would run.")] = False,
    create_dir: Annotated[
        bool,
        typer.Option(
            "--create-dir", help="Create the SQLite file's missing directory (mode 0700)."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Bring the store's schema up to date (creates a new SQLite file, 0600, in an existing
    directory; --create-dir creates the directory too)."""

    async def body() -> dict[str, Any]:
        url, location = store_location(store)  # refuses an unknown scheme as every command
        directory = None if location.path is None else location.path.parent
        created_dir = None
        if directory is not None and not directory.is_dir():
            if not create_dir:
                raise ConfigurationError(
                    f"the directory {directory} does not exist (a mistyped path would start an"
                    " empty store); create it, or add --create-dir",
                    context={"setting": "url"},
                )
            created_dir = str(directory)
        before = await read_schema_info(url)
        if before.version > before.supported:
            raise CliError(
                "STORE_SCHEMA_TOO_NEW",
                f"the store has schema {before.version}; this version knows {before.supported}",
                ExitCode.STORE,
            )
        applied: list[str] = []
        if not dry_run and before.pending:
            if directory is not None and created_dir is not None:
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            async with open_store(store, create=True) as opened:  # opening migrates
                after = await inspector(opened).schema_info()
            applied = list(before.pending)
            before_version, version = before.version, after.version
        else:
            before_version = version = before.version
        return {
            "dry_run": dry_run,
            "created_dir": created_dir,
            "version_before": before_version,
            "version": version,
            "supported": before.supported,
            "pending": list(before.pending) if dry_run else [],
            "applied": applied,
        }

    data = run(as_json, body)

    def human() -> None:
        if data["created_dir"]:
            verb = "would create" if dry_run else "created"
            out.print(f"{verb} the directory {data['created_dir']}", markup=False)
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
    older_than: OlderThanOpt,
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
        for thread_id, turn_id in report.turns[:_LISTED]:
            out.print(f"  turn {thread_id}/{turn_id}", markup=False)
        if len(report.turns) > _LISTED:
            out.print(f"  … and {len(report.turns) - _LISTED} more (--json lists them all)")

    emit(as_json, report, human)
