"""A loopback TCP proxy in front of PostgreSQL that can lose the answer to one statement.

``drop_answer_to(marker)``: the next client bytes containing ``marker`` are forwarded; the
server's answer is read up to its ``ReadyForQuery`` (the statement ran and committed) and
thrown away, then both sides are closed - the client sees a lost connection for a write the
server did make. ``refuse`` closes every new connection at once (the server unreachable).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

READY_FOR_QUERY = b"Z\x00\x00\x00\x05"
"""The server's ``ReadyForQuery`` message (type, length 5): sent after the statement ended."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LossyProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = _free_port()
        self.refuse = False
        self.dropped = 0
        """Answers thrown away so far."""
        self.refused = 0
        self._marker: bytes | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def drop_answer_to(self, marker: bytes) -> None:
        self._marker = marker

    async def __aenter__(self) -> LossyProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse:
            self.refused += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        swallow = asyncio.Event()

        async def upstream() -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await reader.read(65536):
                    marker = self._marker
                    if marker is not None and marker in data:
                        self._marker = None
                        swallow.set()
                        up_writer.write(data)
                        await up_writer.drain()
                        return  # nothing more from this client reaches the server
                    up_writer.write(data)
                    await up_writer.drain()
            up_writer.close()

        async def downstream() -> None:
            seen = b""
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await up_reader.read(65536):
                    if not swallow.is_set():
                        writer.write(data)
                        await writer.drain()
                        continue
                    seen += data
                    if READY_FOR_QUERY in seen:  # the statement ended: its answer is lost
                        self.dropped += 1
                        break
            writer.close()
            up_writer.close()

        await asyncio.gather(upstream(), downstream())
        self._writers.difference_update((writer, up_writer))
