"""Helpers for relay tests: commit a workload, run relays until the outbox drains."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from intention_kernel.contracts import KernelEvent
from intention_kernel.relay import Backoff, OutboxRelay
from intention_kernel.testing import MemoryDurability
from intention_kernel.testing.conformance.outbox import commit_events

FAST = Backoff(initial=0.01, maximum=0.05, jitter=0.0)


async def commit_workload(
    store: MemoryDurability, *, threads: int, turns: int, per_turn: int, prefix: str = "t"
) -> dict[str, list[str]]:
    """Commit turns round-robin over threads; returns each thread's event ids in commit order."""
    for turn in range(turns):
        for thread in range(threads):
            await commit_events(store, f"{prefix}{thread}", f"turn-{turn:04d}", per_turn)
    committed: dict[str, list[str]] = {}
    for stored in await store.read_outbox(limit=10_000):
        committed.setdefault(stored.event.thread_id, []).append(stored.event.id)
    return committed


def first_delivery_order(events: Sequence[KernelEvent]) -> dict[str, list[str]]:
    """Per thread, event ids in the order they were first delivered."""
    seen: set[str] = set()
    order: dict[str, list[str]] = {}
    for event in events:
        if event.id not in seen:
            seen.add(event.id)
            order.setdefault(event.thread_id, []).append(event.id)
    return order


async def run_until_drained(
    store: MemoryDurability,
    relays: Sequence[OutboxRelay],
    *,
    within: float = 30.0,
    running: Sequence[asyncio.Task[None]] | None = None,
) -> None:
    """Run the relays (unless ``running`` are their tasks) until nothing is pending except
    events held back behind a dead one, then stop them gracefully."""
    tasks = list(running) if running is not None else [asyncio.create_task(r.run()) for r in relays]
    deadline = time.monotonic() + within
    try:
        while True:
            stats = await store.outbox_stats()
            if stats.pending == 0 or (stats.blocked_threads and await _only_blocked(store)):
                break
            for task in tasks:
                if task.done():
                    task.result()  # surface a crash
            assert time.monotonic() < deadline, f"outbox did not drain: {stats}"
            await asyncio.sleep(0.02)
    finally:
        for relay in relays:
            relay.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)


async def eventually(predicate: Callable[[], bool], *, within: float = 5.0) -> None:
    """Poll ``predicate`` until it holds (fails the test after ``within`` seconds)."""
    for _ in range(int(within / 0.005)):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached in time")


async def _only_blocked(store: MemoryDurability) -> bool:
    """Every pending event is on a thread that a dead event holds back."""
    outbox = await store.read_outbox(limit=10_000)
    blocked = {e.event.thread_id for e in outbox if e.dead}
    return all(e.event.thread_id in blocked for e in outbox if e.delivered_at is None)
