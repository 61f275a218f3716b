"""A real relay process for the relay fault tests (run as a script, one JSON argument).

Delivers a SQLite outbox (``db``) or a PostgreSQL one (``dsn`` and ``schema``) to a ``file://``
sink until the outbox has nothing pending (and, when ``stop_file`` is given, that file exists),
then prints ``{"relay", "delivered"}``. ``partition`` (``"i/n"``) gives it a share of the
threads. With ``crash`` (a ``RelayCrashPoint`` value) it
``SIGKILL``s itself the ``nth`` time it reaches it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from intention_kernel._crashpoints import RelayCrashPoint, kill_at, set_crash_hook
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.relay import OutboxRelay, Partition, open_sink
from intention_kernel.testing.conformance.outbox import OutboxStore


async def relay(spec: dict[str, Any]) -> None:
    if spec.get("crash"):
        set_crash_hook(kill_at(RelayCrashPoint(spec["crash"]), nth=int(spec.get("nth", 1))))
    store: OutboxStore
    if "dsn" in spec:
        store = await PostgresDurability.open(spec["dsn"], schema=spec["schema"], max_size=2)
    else:
        store = await SQLiteDurability.open(spec["db"], busy_timeout=30)
    sink = open_sink(f"file://{spec['sink']}")
    worker = OutboxRelay(
        store,
        sink,
        relay_id=spec.get("relay_id"),
        batch_size=int(spec.get("batch_size", 50)),
        claim_ttl=float(spec.get("claim_ttl", 30)),
        poll_interval=0.02,
        partition=Partition.parse(spec["partition"]) if "partition" in spec else None,
    )
    stop_file = spec.get("stop_file")
    try:
        while True:
            report = await worker.run_once()
            if report.claimed:
                continue
            produced = stop_file is None or await asyncio.to_thread(os.path.exists, stop_file)
            if produced and (await store.outbox_stats()).pending == 0:
                break
            await asyncio.sleep(0.02)
    finally:
        await sink.close()
        await store.close()
    print(json.dumps({"relay": worker.relay_id, "delivered": worker.stats.delivered}), flush=True)


if __name__ == "__main__":
    asyncio.run(relay(json.loads(sys.argv[1])))
