"""A private NATS server for the ingress tests, and a publisher that routes a thread's turns
to its partition."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nats
import nats.errors
import nats.js.errors

from intention_kernel.ingress import encode_turn, partition_of
from tests.relay._net import PrivateServer

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
