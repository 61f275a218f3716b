"""Request framing on the shipped server: a request that declares both ``Content-Length`` and
``Transfer-Encoding: chunked`` is refused and its connection closed (RFC 9112, section 6.3), so
the bytes after its chunked body are never served as a second, smuggled request."""

from __future__ import annotations

import asyncio
import re

import pytest

from .support import TOKENS, Live

SMUGGLED = b"GET /v1/threads/t-1 HTTP/1.1\r\nHost: 127.0.0.1\r\n" + (
    f"Authorization: Bearer {TOKENS['alice']}\r\n\r\n".encode()
)


def _ambiguous(method: str, path: str, extra: bytes = b"") -> bytes:
    """A request whose Content-Length covers a chunked body and a second request after it: a
    front end that frames by Content-Length sees one request, a chunked reader sees two."""
    body = b"0\r\n\r\n" + SMUGGLED
    return (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
        + extra
        + f"Content-Length: {len(body)}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + body
    )


async def _exchange(live: Live, request: bytes) -> tuple[bytes, bool]:
    """Everything the server answers to ``request`` and whether it closed the connection
    (``False``: it kept it open for more than 10 seconds after its last byte)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", live.server.port)
    writer.write(request)
    await writer.drain()
    received = b""
    closed = True
    try:
        while True:
            chunk = await asyncio.wait_for(reader.read(65_536), 10)
            if not chunk:
                break
            received += chunk
    except TimeoutError:
        closed = False
    finally:
        writer.close()
    return received, closed


@pytest.mark.parametrize(
    ("method", "path", "extra"),
    [
        ("GET", "/healthz", b""),
        (
            "POST",
            "/v1/threads/t-1/turns",
            f"Authorization: Bearer {TOKENS['alice']}\r\nIdempotency-Key: k-1\r\n"
            "Content-Type: application/json\r\n".encode(),
        ),
    ],
    ids=["get", "post-turn"],
)
async def test_content_length_with_chunked_is_refused_and_closed(
    live: Live, method: str, path: str, extra: bytes
) -> None:
    received, closed = await _exchange(live, _ambiguous(method, path, extra))
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", received)
    assert statuses == [b"400"], received
    assert closed, f"the connection was kept open after: {received!r}"
    # Nothing of the smuggled request ran: it would have answered the thread (404 or 200).
    assert b"THREAD_NOT_FOUND" not in received and b"thread_id" not in received


async def test_a_well_framed_chunked_request_is_served(live: Live) -> None:
    body = b'{"text": "Find a hotel in Lisbon for 2 nights"}'
    request = (
        b"POST /v1/threads/t-1/turns HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {TOKENS['alice']}\r\n".encode()
        + b"Idempotency-Key: k-1\r\nContent-Type: application/json\r\n"
        + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\n\r\n"
    )
    received, closed = await _exchange(live, request)
    assert received.startswith(b"HTTP/1.1 200 "), received
    assert b'"turn_id":"k-1"' in received and closed
