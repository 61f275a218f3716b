"""A worker process for the kill -9 tests: one travel desk turn on a SQLite file.

Usage: ``python _desk_worker.py DB CALLS_FILE TURN_ID TEXT [CRASH_POINT]``. Provider calls are
appended to ``CALLS_FILE`` (so they survive the kill); the turn's response text is printed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from intention_kernel._crashpoints import CrashPoint, kill_at, set_crash_hook
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.examples.travel_desk import FakeHotelProvider, build_agent, scripted_model
from intention_kernel.kernel import Kernel


class RecordingProvider(FakeHotelProvider):
    def __init__(self, calls_file: str) -> None:
        super().__init__()
        self.calls_file = calls_file

    async def book(self, quote: dict[str, Any], *, idempotency_key: str) -> dict[str, Any]:
        _append(self.calls_file, idempotency_key)
        return await super().book(quote, idempotency_key=idempotency_key)


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


async def main(db: str, calls_file: str, turn_id: str, text: str, crash: str | None) -> None:
    store = await SQLiteDurability.open(db)
    try:
        kernel = Kernel(
            durability=store,
            model=scripted_model(),
            ports={"hotels": RecordingProvider(calls_file)},
        )
        agent = kernel.compile(build_agent())
        if crash:
            set_crash_hook(kill_at(CrashPoint(crash)))
        result = await agent.run(thread_id="t1", turn_id=turn_id, text=text)
        print(json.dumps({"text": result.response.text, "replayed": result.replayed}))
    finally:
        await store.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], args[2], args[3], args[4] if len(args) > 4 else None))
