"""What a budget reservation and a provider slot add to each model call, per store.

For each store (memory, SQLite, PostgreSQL when reachable) it times, one after another: a
reservation and its settle (the budget path of one call), and a slot's acquire and release
(the provider-limit path). Prints one line per store and writes
``bench/results/flow_overhead.json``.

    python bench/flow_overhead.py [--calls 500] [--dsn postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from intention_kernel.contracts.flow import BudgetLine, SlotRequest
from intention_kernel.contracts.ids import new_id
from intention_kernel.durability.postgres import PostgresDurability, drop_schema
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing import MemoryDurability


async def measure(store: Any, calls: int) -> dict[str, float]:
    counters = store.counters
    line = BudgetLine(new_id("bench"), "tenant", "day", 10**12, None)
    budget, slot = [], []
    for _ in range(calls):
        started = time.perf_counter()
        reserved = (await counters.reserve(line, 6000, 0.0)).reservation
        assert reserved is not None
        await counters.settle(reserved.id, 120, 0.0)
        budget.append(time.perf_counter() - started)
        started = time.perf_counter()
        request = SlotRequest("bench", new_id("call"), 4, None, 30.0)
        assert (await counters.acquire_slot(request)).granted
        await counters.release_slot("bench", request.holder)
        slot.append(time.perf_counter() - started)
    return {
        "reserve_settle_median_ms": statistics.median(budget) * 1000,
        "reserve_settle_p99_ms": sorted(budget)[int(len(budget) * 0.99) - 1] * 1000,
        "slot_median_ms": statistics.median(slot) * 1000,
        "slot_p99_ms": sorted(slot)[int(len(slot) * 0.99) - 1] * 1000,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    async with MemoryDurability() as memory:
        results["memory"] = await measure(memory, args.calls)
    with tempfile.TemporaryDirectory() as directory:
        async with await SQLiteDurability.open(Path(directory) / "bench.db") as sqlite:
            results["sqlite"] = await measure(sqlite, args.calls)
    schema = new_id("ik_bench").lower()
    try:
        async with PostgresDurability.open(args.dsn, schema=schema, setup=True) as postgres:
            results["postgres"] = await measure(postgres, args.calls)
    except OSError as exc:
        print(f"postgres skipped: {exc}")
    finally:
        with contextlib.suppress(OSError):
            await drop_schema(args.dsn, schema)
    for name, figures in results.items():
        print(
            f"{name:9} reserve+settle {figures['reserve_settle_median_ms']:.3f} ms median"
            f" ({figures['reserve_settle_p99_ms']:.3f} p99);"
            f" slot acquire+release {figures['slot_median_ms']:.3f} ms median"
            f" ({figures['slot_p99_ms']:.3f} p99)"
        )
    out = Path(__file__).parent / "results" / "flow_overhead.json"
    out.write_text(json.dumps({"calls": args.calls, "stores": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main())
