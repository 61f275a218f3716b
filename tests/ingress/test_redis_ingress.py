"""``RedisIngress`` against a private Redis and a real SQLite store: entries are submitted in
stream order per thread and acknowledged; a refused entry is dropped; a second process waits
while the first holds the partitions, and takes them over, with what the first read and never
acknowledged, once the first stops renewing its leases."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from intention_kernel.ingress import RedisIngress, encode_turn, partition_of
from intention_kernel.kernel import CompiledAgent

from .support import add_turns, private_redis

PARTITIONS = 2


async def _requests(agent: CompiledAgent) -> list[Any]:
    assert agent.inbox is not None
    found: list[Any] = await agent.inbox.list_requests(limit=1000)
    return sorted(found, key=lambda r: r.position)


def _ingress(agent: CompiledAgent, url: str, **options: Any) -> RedisIngress:
    return RedisIngress(agent.submit, url, partitions=PARTITIONS, lease=1.5, retry=0.05, **options)


async def _until(ingress: RedisIngress, count: int) -> None:
    async with asyncio.timeout(30):
        while ingress.stats.submitted + ingress.stats.refused < count:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def _pending(url: str) -> int:
    client = aioredis.Redis.from_url(url)
    try:
        total = 0
        for index in range(PARTITIONS):
            summary: Any = await client.xpending(f"ik:turns:{index}", "ik-turns")
            total += int(summary["pending"])
        return total
    finally:
        await client.aclose()


async def test_entries_are_submitted_in_stream_order(agent: CompiledAgent, tmp_path: Path) -> None:
    with private_redis(tmp_path) as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        threads = ["alpha", "beta", "gamma", "delta"]
        turns = [(t, f"{t}-{i}", f"message {i}") for i in range(4) for t in threads]
        await add_turns(url, turns, PARTITIONS)
        client = aioredis.Redis.from_url(url)
        bad = f"ik:turns:{partition_of('alpha', PARTITIONS)}"
        await client.xadd(bad, {"turn_id": "broken", "body": b"{nope"})
        await client.xadd(bad, {"turn_id": "alpha-4", "body": encode_turn("alpha", text="last")})
        await client.aclose()
        ingress = _ingress(agent, url)
        stopping = asyncio.Event()
        task = asyncio.create_task(ingress.run(stopping))
        await _until(ingress, len(turns) + 2)
        stopping.set()
        await asyncio.wait_for(task, 10)
        assert (ingress.stats.submitted, ingress.stats.refused) == (len(turns) + 1, 1)
        stored = await _requests(agent)
        for thread in threads:
            mine = [r.turn_id for r in stored if r.thread_id == thread]
            expected = [f"{thread}-{i}" for i in range(5 if thread == "alpha" else 4)]
            assert mine == expected
        assert stored[0].host_context["ingress"]["broker"] == "redis"
        assert await _pending(url) == 0


async def test_a_stopped_holder_is_taken_over_with_what_it_left_unacknowledged(
    agent: CompiledAgent, tmp_path: Path
) -> None:
    held = asyncio.Event()
    release = asyncio.Event()

    async def stuck(**request: Any) -> Any:
        if request["turn_id"] == "alpha-1":
            held.set()
            await release.wait()  # the first process hangs on this entry, then is gone
        return await agent.submit(**request)

    with private_redis(tmp_path) as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        turns = [("alpha", f"alpha-{i}", f"m {i}") for i in range(4)]
        await add_turns(url, turns, PARTITIONS)
        first = RedisIngress(stuck, url, partitions=PARTITIONS, lease=1.5, retry=0.05)
        stop_first = asyncio.Event()
        first_task = asyncio.create_task(first.run(stop_first))
        async with asyncio.timeout(10):
            await held.wait()
        second = _ingress(agent, url)
        stop_second = asyncio.Event()
        second_task = asyncio.create_task(second.run(stop_second))
        await asyncio.sleep(1.0)
        assert second.stats.submitted == 0  # the first still holds the partition
        first_task.cancel()  # gone without a word: its leases run out
        await asyncio.wait({first_task}, timeout=10)
        assert first_task.cancelled()
        await _until(second, 3)
        stop_second.set()
        await asyncio.wait_for(second_task, 10)
        assert [r.turn_id for r in await _requests(agent)] == [t[1] for t in turns]
        assert await _pending(url) == 0
