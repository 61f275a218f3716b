"""Loopback helpers for broker tests: service checks and a TCP proxy the test can cut."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time

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


class PrivateServer:
    """A broker of the test's own (``nats-server`` or ``redis-server``) on a free loopback port,
    which the test may hang with SIGSTOP and wake with SIGCONT: the shared services are never
    paused. Killed when the test ends."""

    def __init__(self, argv: list[str], port: int) -> None:
        self.argv = argv
        self.port = port
        self._process: subprocess.Popen[bytes] | None = None

    @classmethod
    def nats(cls, data_dir: str) -> PrivateServer:
        port = free_port()
        return cls(
            ["nats-server", "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", data_dir], port
        )

    @classmethod
    def redis(cls) -> PrivateServer:
        port = free_port()
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port)]
        return cls([*argv, "--save", "", "--appendonly", "no"], port)

    def start(self) -> None:
        binary = shutil.which(self.argv[0])
        if binary is None:
            message = f"{self.argv[0]} is not installed"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
        self._process = subprocess.Popen(
            [binary, *self.argv[1:]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{self.argv[0]} did not start on {self.port}") from None
                time.sleep(0.05)

    def pause(self) -> None:
        """The server stops answering; its connections stay open (as in a hang)."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)
            self._process.kill()
            self._process.wait(10)
            self._process = None


class StallingProxy(TcpProxy):
    """A ``TcpProxy`` that, while ``stalled``, accepts connections and forwards nothing: a peer
    that takes the request and never answers. Held connections are dropped by ``unstall``."""

    def __init__(self, target: int, port: int | None = None) -> None:
        super().__init__(target, port)
        self.stalled = False
        self.held = 0
        self._holding: set[asyncio.StreamWriter] = set()

    def stall(self) -> None:
        self.stalled = True

    def unstall(self) -> None:
        self.stalled = False
        for writer in list(self._holding):
            writer.close()
        self._holding.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.stalled:
            await super()._handle(reader, writer)
            return
        self.held += 1
        self._holding.add(writer)
        try:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while await reader.read(65536):  # swallow the request, answer nothing
                    pass
        finally:
            self._holding.discard(writer)
            writer.close()
