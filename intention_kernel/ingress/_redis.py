"""``RedisIngress``: turns from Redis Streams, one stream per partition, one consumer group.

Why a lease per partition: a consumer group hands a stream's entries to all its consumers at
once, which would submit a thread's turns out of order. So a process reads a partition's stream
only while it holds the partition's lease (a key ``<stream>:<partition>:owner`` set with ``NX``
and an expiry, renewed at a third of it). A process that dies (``kill -9``) stops renewing; once
its lease expires another process takes the partition, first claims the entries the dead one
read and never acknowledged (``XAUTOCLAIM``, in stream order) and submits them, then reads on.
A process that no longer holds the lease stops before its next entry.

An entry is ``{"turn_id": ..., "body": <the JSON of a turn>}`` (``encode_turn``); without
``turn_id`` its stream id is the turn id. It is acknowledged (``XACK``) once submitted, or once
refused (logged and dropped, as on NATS).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from ..contracts.errors import ConfigurationError
from ._partitions import run_partitions
from ._stats import IngressStats
from ._submitting import Delivery, SubmitTurn, pause, submit_message

__all__ = ["RedisIngress"]

log = logging.getLogger("intention_kernel.ingress")

READ_BLOCK_MS = 1000
"""How long one read waits for an entry (a stop or a lost lease is noticed within it)."""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_FAILURES = (OSError, TimeoutError, redis.exceptions.RedisError)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class RedisIngress:
    """Submits the turns added to ``<stream>:<partition>`` (consumer group ``group``, created
    if missing) through ``submit``, until ``run``'s ``stopping`` is set."""

    def __init__(
        self,
        submit: SubmitTurn,
        url: str,
        *,
        stream: str = "ik:turns",
        group: str = "ik-turns",
        partitions: int = 4,
        lease: float = 10.0,
        retry: float = 1.0,
    ) -> None:
        if not 1 <= partitions <= 1024:
            raise ConfigurationError(
                "partitions must be from 1 to 1024", context={"setting": "partitions"}
            )
        if not 1.0 <= lease <= 3600.0:
            raise ConfigurationError(
                "lease must be from 1 to 3600 seconds", context={"setting": "lease"}
            )
        self._submit = submit
        self.url = url
        self.stream = stream
        self.group = group
        self.partitions = partitions
        self.lease = lease
        self.retry = retry
        self.consumer = f"ingress-{uuid.uuid4().hex[:12]}"
        self.stats = IngressStats()

    async def run(self, stopping: asyncio.Event) -> None:
        """Take the partitions no live process holds and submit their entries, until
        ``stopping`` is set (an unreachable server is tried again)."""
        client = aioredis.Redis.from_url(
            self.url, socket_timeout=READ_BLOCK_MS / 1000 + 5, socket_connect_timeout=2
        )
        renew = client.register_script(_RENEW)
        try:
            await run_partitions(
                self.partitions,
                lambda index, halt: self._partition(client, renew, index, halt),
                stopping,
            )
        finally:
            with contextlib.suppress(*_FAILURES):
                await client.aclose()

    async def _partition(
        self, client: aioredis.Redis, renew: Any, index: int, stopping: asyncio.Event
    ) -> None:
        key = f"{self.stream}:{index}"
        owner = f"{key}:owner"
        lease_ms = int(self.lease * 1000)
        while not stopping.is_set():
            try:
                held = await client.set(owner, self.consumer, nx=True, px=lease_ms)
                if not held and not await renew(keys=[owner], args=[self.consumer, lease_ms]):
                    await pause(stopping, self.lease / 3)  # another process holds it
                    continue
                lost = asyncio.Event()
                keeper = asyncio.create_task(self._keep(renew, owner, lease_ms, lost, stopping))
                try:
                    await self._read(client, key, lost, stopping)
                finally:
                    keeper.cancel()
                    await asyncio.wait({keeper})  # never swallows this task's own cancellation
                if lost.is_set():
                    log.warning("partition %s: its lease was lost, stopped reading it", key)
            except _FAILURES as exc:
                log.warning("partition %s: Redis failed: %s", key, type(exc).__name__)
                await pause(stopping, self.retry)

    async def _keep(
        self, renew: Any, owner: str, lease_ms: int, lost: asyncio.Event, stopping: asyncio.Event
    ) -> None:
        """Renew the lease at a third of its time; a renewal refused (another holds it) or
        failing past the lease's end sets ``lost``."""
        loop = asyncio.get_running_loop()
        held_until = loop.time() + self.lease
        while not stopping.is_set():
            await pause(stopping, self.lease / 3)
            try:
                if not await renew(keys=[owner], args=[self.consumer, lease_ms]):
                    break
                held_until = loop.time() + self.lease
            except _FAILURES:
                if loop.time() >= held_until:
                    break
        lost.set()

    async def _read(
        self, client: aioredis.Redis, key: str, lost: asyncio.Event, stopping: asyncio.Event
    ) -> None:
        """The partition's entries in stream order: those a dead holder read and never
        acknowledged, this consumer's own unacknowledged ones, then new ones."""
        with contextlib.suppress(redis.exceptions.ResponseError):  # BUSYGROUP: it exists
            await client.xgroup_create(key, self.group, id="0", mkstream=True)
        start: Any = "0-0"
        while True:  # this process holds the lease: every other consumer's entries are orphans
            claimed: Any = await client.xautoclaim(
                key, self.group, self.consumer, min_idle_time=0, start_id=start, count=100
            )  # [next start, claimed entries, deleted ids]
            start = claimed[0]
            if _text(start) == "0-0":
                break
        backlog = True
        while not (stopping.is_set() or lost.is_set()):
            found: Any = await client.xreadgroup(
                self.group,
                self.consumer,
                {key: "0" if backlog else ">"},
                count=10,
                block=None if backlog else READ_BLOCK_MS,
            )
            entries: list[Any] = found[0][1] if found else []  # RESP2: [[key, entries]]
            if backlog and not entries:
                backlog = False
                continue
            for entry_id, fields in entries:
                if stopping.is_set() or lost.is_set():
                    return
                if not await self._deliver(client, key, entry_id, fields or {}, stopping):
                    return

    async def _deliver(
        self,
        client: aioredis.Redis,
        key: str,
        entry_id: Any,
        fields: dict[Any, Any],
        stopping: asyncio.Event,
    ) -> bool:
        """Submit one entry, then acknowledge it (a refused one too); ``False`` when stopping
        left it unacknowledged."""
        named = fields.get(b"turn_id")  # the client answers bytes (no decode_responses)
        delivery = await submit_message(
            self._submit,
            fields.get(b"body", b""),
            _text(named if named is not None else entry_id),
            {"broker": "redis", "stream": key, "id": _text(entry_id)},
            self.stats,
            stopping,
            retry=self.retry,
        )
        if delivery is Delivery.STOPPED:
            return False
        await client.xack(key, self.group, entry_id)  # lost: read again, the same request
        return True
