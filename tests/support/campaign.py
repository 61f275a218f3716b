"""The fault campaign: the explorer's cases at scale, on real stores, with a report.

    python -m tests.support.campaign --faults 10000 --json bench/results/faults.json

Runs, for each store (SQLite in a temporary directory, PostgreSQL in a scratch schema, or the
memory store), every fault position of every kind on every turn shape, then random cases until
the store's share of ``--faults`` was injected. Prints the faults injected by kind and store and
the invariant violations; exits 1 if there was any violation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from intention_kernel.contracts.durability import DurabilityStore
from intention_kernel.testing.conformance._explorer import KINDS, Kind, Report, explore

__all__ = ["main", "run_campaign"]

STORES = ("sqlite", "postgres", "memory")


@asynccontextmanager
async def _stores(kind: str, dsn: str | None) -> AsyncIterator[tuple[DurabilityStore, ...]]:
    """Two adapter instances over one fresh storage (the second delivers duplicates)."""
    if kind == "memory":
        from intention_kernel.durability.memory import MemoryDurability, MemoryStore

        shared = MemoryStore()
        yield MemoryDurability(shared), MemoryDurability(shared)
    elif kind == "sqlite":
        from intention_kernel.durability.sqlite import SQLiteDurability

        with tempfile.TemporaryDirectory(prefix="ik-campaign-") as directory:
            path = Path(directory) / "campaign.db"
            first = await SQLiteDurability.open(path)
            second = await SQLiteDurability.open(path)
            try:
                yield first, second
            finally:
                await first.close()
                await second.close()
    else:
        from intention_kernel.durability.postgres import PostgresDurability

        from .postgres import drop_schema, postgres_dsn, scratch_schema

        url = dsn or postgres_dsn()
        schema = scratch_schema("ik_campaign")
        primary = await PostgresDurability.open(url, schema=schema, setup=True)
        other = await PostgresDurability.open(url, schema=schema)
        try:
            yield primary, other
        finally:
            await primary.close()
            await other.close()
            await drop_schema(url, schema)


async def run_campaign(
    stores: tuple[str, ...],
    *,
    faults: int,
    seed: int = 0,
    kinds: tuple[Kind, ...] = KINDS,
    dsn: str | None = None,
    budget_seconds: float | None = None,
) -> list[Report]:
    """One report per store; each store gets an equal share of ``faults``."""
    reports = []
    share = -(-faults // len(stores))
    for name in stores:
        async with _stores(name, dsn) as (store, duplicate):
            reports.append(
                await explore(
                    store,
                    duplicate=duplicate,
                    name=name,
                    kinds=kinds,
                    faults=share,
                    seed=seed,
                    budget_seconds=budget_seconds,
                )
            )
    return reports


def summary(reports: list[Report]) -> dict[str, object]:
    total = Report(store="all")
    for report in reports:
        total.add(report)
    return {"total": total.to_json(), "stores": [r.to_json() for r in reports]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.campaign")
    parser.add_argument("--store", action="append", choices=STORES, help="repeatable")
    parser.add_argument("--faults", type=int, default=10_000, help="faults to inject in all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", action="append", choices=KINDS, help="repeatable")
    parser.add_argument("--dsn", help="PostgreSQL URL (default: IK_POSTGRES_DSN or local)")
    parser.add_argument("--budget", type=float, help="seconds per store at most")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args(argv)
    stores = tuple(args.store or ("sqlite", "postgres"))
    kinds = tuple(args.kind or KINDS)
    reports = asyncio.run(
        run_campaign(
            stores,
            faults=args.faults,
            seed=args.seed,
            kinds=kinds,
            dsn=args.dsn,
            budget_seconds=args.budget,
        )
    )
    result = summary(reports)
    for report in reports:
        kinds_text = ", ".join(f"{k} {n}" for k, n in sorted(report.faults.items()))
        print(
            f"{report.store}: {report.injected} faults injected ({kinds_text}) in "
            f"{report.cases} cases, {report.seconds:.0f} s: {len(report.violations)} violations"
        )
        for violation in report.violations[:20]:
            print(f"  {violation}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if any(r.violations for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
