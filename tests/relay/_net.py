"""Loopback helpers for broker tests: service checks and a TCP proxy the test can cut."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import pytest


def require_service(port: int, name: str) -> None:
    """Skip when the local service is down, except under CI, where that is a failure."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return
    except OSError:
        message = f"{name} is not reachable on 127.0.0.1:{port} (scripts/services starts it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target``; ``stop()`` drops every connection,
    modelling a broker that goes away; ``start()`` brings it back on the same port."""

    def __init__(self, target: int, port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers.difference_update((writer, up_writer))
