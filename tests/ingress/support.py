"""Private NATS and Redis servers for the ingress tests, and publishers that route a thread's
turns to its partition."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
import redis.asyncio as aioredis
import redis.exceptions

from intention_kernel.ingress import encode_turn, partition_of
from tests.relay._net import PrivateServer, free_port

STREAM = "IK_TURNS"
SUBJECT = "ik.turns"


@contextmanager
def private_nats(tmp_path: Path) -> Iterator[PrivateServer]:
    """``nats-server -js`` on a free port with its store under ``tmp_path``, killed at the end."""
    server = PrivateServer.nats(str(tmp_path / "jetstream"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def ensure_stream(url: str) -> None:
    """The stream the ingress reads (publishers may create it first)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        try:
            await js.stream_info(STREAM)
        except nats.js.errors.NotFoundError:
            await js.add_stream(name=STREAM, subjects=[f"{SUBJECT}.*"])
    finally:
        await nc.close()


async def publish(
    url: str,
    turns: list[tuple[str, str, str]],
    partitions: int,
    *,
    headers: dict[str, dict[str, str]] | None = None,
    pause: float = 0.0,
) -> None:
    """Publish ``(thread_id, turn_id, text)`` in order, each to its thread's partition with
    ``Nats-Msg-Id`` = the turn id, retrying (the same id: stored once) while the server is
    away. ``headers[turn_id]`` replaces a message's headers."""
    nc = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        js = nc.jetstream(timeout=2.0)
        for thread_id, turn_id, text in turns:
            subject = f"{SUBJECT}.{partition_of(thread_id, partitions)}"
            sent = (headers or {}).get(turn_id, {"Nats-Msg-Id": turn_id})
            while True:
                try:
                    await js.publish(subject, encode_turn(thread_id, text=text), headers=sent)
                    break
                except (OSError, TimeoutError, nats.errors.Error):
                    await asyncio.sleep(0.2)
            if pause:
                await asyncio.sleep(pause)
    finally:
        await nc.close()


@contextmanager
def private_redis(tmp_path: Path) -> Iterator[PrivateServer]:
    """``redis-server`` on a free port that keeps its data (an append-only file written on
    every command) under ``tmp_path``: a restart loses nothing. Killed at the end."""
    port = free_port()
    data = tmp_path / "redis"
    data.mkdir(exist_ok=True)
    argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data)]
    server = PrivateServer([*argv, "--appendonly", "yes", "--appendfsync", "always"], port)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def add_turns(
    url: str,
    turns: list[tuple[str, str, str]],
    partitions: int,
    *,
    pause: float = 0.0,
) -> None:
    """Add ``(thread_id, turn_id, text)`` in order to each thread's partition stream,
    retrying (a repeat is the same turn) while the server is away."""
    client = aioredis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=1)
    try:
        for thread_id, turn_id, text in turns:
            key = f"ik:turns:{partition_of(thread_id, partitions)}"
            fields = {"turn_id": turn_id, "body": encode_turn(thread_id, text=text)}
            while True:
                try:
                    await client.xadd(key, fields)  # type: ignore[arg-type]
                    break
                except (OSError, redis.exceptions.RedisError):
                    await asyncio.sleep(0.2)
            if pause:
                await asyncio.sleep(pause)
    finally:
        await client.aclose()
