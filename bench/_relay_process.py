"""One relay process of ``relay_partitions.py``: opens the store and the sink, says ``ready``,
waits for ``go`` on stdin, then delivers until SIGTERM and prints its stats as JSON.

    python bench/_relay_process.py STORE_URL SINK_URL [i/N]
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

from intention_kernel.durability import open_durability
from intention_kernel.relay import OutboxRelay, Partition, open_sink

BATCH = 200


async def main(store_url: str, sink_url: str, share: str | None) -> None:
    store = await open_durability(store_url)
    sink = open_sink(sink_url)
    relay = OutboxRelay(
        store,  # type: ignore[arg-type]
        sink,
        batch_size=BATCH,
        poll_interval=0.01,
        partition=None if share is None else Partition.parse(share),
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, relay.stop)
    print("ready", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    try:
        await relay.run()
    finally:
        await sink.close()
        await store.close()
    stats = relay.stats
    print(json.dumps({"delivered": stats.delivered, "batches": stats.batches}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
