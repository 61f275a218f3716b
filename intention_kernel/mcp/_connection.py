"""``McpServer``: one MCP server's connection, opened once, shared by its tools, closed once.

Why a lifecycle object: opening a connection per call would start a server process (stdio) or
a protocol handshake (HTTP) for every tool call, and would leave nobody to close it. The SDK's
``mcp.Client`` does the protocol; this object owns it in a task of its own (a transport that
fails ends that task, not the caller's), reopens it on the next call after it ended, and tells
each write whether its request ever left this process: the transport's write stream is wrapped
so the request's ``_meta`` idempotency key is noted as it is handed over. A call that was never
handed over provably did not reach the server; one that was may have been applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self, cast

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client._transport import Transport, TransportStreams, WriteStream
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import RequestParamsMeta
from pydantic import ValidationError

from ._errors import McpError, McpToolDefinitionError, McpUnavailableError

__all__ = ["IDEMPOTENCY_META_KEY", "McpServer", "ServerTarget"]

IDEMPOTENCY_META_KEY = "io.intention-kernel/idempotency-key"
"""The ``_meta`` field of a write's ``tools/call`` that carries the ledger's provider key: the
same on every attempt of one operation, so a server that honours it can deduplicate too."""

ServerTarget = StdioServerParameters | str | Callable[[], Transport]
"""How to reach a server: a command to start (stdio), a streamable HTTP URL, or a function that
returns a fresh SDK transport (``lambda: sse_client(url)``), called for every connection."""

_NAME = re.compile(r"^[a-z][a-z0-9_\-]{0,39}$")
MAX_TOOLS = 512
"""Tools one server may list; more is refused (a runaway listing is not a catalog)."""
_MAX_PAGES = 64


class _TrackedWrite:
    """The transport's write stream, noting the idempotency key of each request it accepts."""

    def __init__(self, inner: WriteStream[SessionMessage], sent: set[str]) -> None:
        self._inner = inner
        self._sent = sent

    async def send(self, item: SessionMessage, /) -> None:
        await self._inner.send(item)
        message = item.message
        if isinstance(message, types.JSONRPCRequest) and message.params:
            key = (message.params.get("_meta") or {}).get(IDEMPOTENCY_META_KEY)
            if isinstance(key, str):
                self._sent.add(key)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


class _TrackedTransport(contextlib.AbstractAsyncContextManager[TransportStreams]):
    def __init__(self, inner: Transport, sent: set[str]) -> None:
        self._inner = inner
        self._sent = sent

    async def __aenter__(self) -> TransportStreams:
        read, write = await self._inner.__aenter__()
        return read, _TrackedWrite(write, self._sent)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)


class _UndeliveredHttp(httpx2.AsyncBaseTransport):
    """The HTTP client's transport, noting a write whose connection could not be opened: no
    byte of that request reached the server (any later failure may have, and is not noted)."""

    def __init__(self, undelivered: set[str]) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._undelivered = undelivered

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self._inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout):
            key = _key_of(request.content)
            if key is not None:
                self._undelivered.add(key)
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


def _key_of(body: bytes) -> str | None:
    try:
        message = json.loads(body)
        key = message["params"]["_meta"][IDEMPOTENCY_META_KEY]
    except (ValueError, KeyError, TypeError):
        return None
    return key if isinstance(key, str) else None


class _Live:
    """One open connection: its client, the task that owns it and the keys it sent."""

    def __init__(self) -> None:
        self.sent: set[str] = set()
        self.undelivered: set[str] = set()
        """Keys of requests the HTTP client could not even connect for."""
        self.ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self.stop = asyncio.Event()
        self.ended = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.broken = False
        """A call saw the connection end: the next call opens a new one."""


class McpServer:
    """An MCP server, reached through the official SDK, for ``capabilities_from_mcp``.

    Use it as an async context manager around the agent's life: the connection opens on entry
    (``connect_timeout`` bounds the start and the handshake: a server that hangs there is
    ``McpUnavailableError``), is shared by every call, is reopened by the next call after it
    ended (a server that exited), and is closed on exit. ``name`` prefixes the capability ids
    (``notes.add_note``). ``call_timeout`` bounds one call: a write whose answer does not come
    in time is ``uncertain``, never sent again.
    """

    def __init__(
        self,
        target: ServerTarget,
        *,
        name: str,
        connect_timeout: float = 10.0,
        call_timeout: float = 60.0,
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise McpToolDefinitionError(
                "the server name must be lowercase letters, digits, _ or -, starting with a"
                " letter (at most 40 characters)",
                context={"field": "name"},
            )
        if not (0 < connect_timeout <= 600 and 0 < call_timeout <= 3600):
            raise McpToolDefinitionError(
                "connect_timeout and call_timeout must be positive seconds",
                context={"field": "timeout"},
            )
        self.name = name
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self._target = target
        self._live: _Live | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False

    async def __aenter__(self) -> Self:
        self._closed = False
        await self._client()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection (stops a stdio server). A later call is refused."""
        self._closed = True
        live, self._live = self._live, None
        if live is not None:
            await _end(live)

    async def _transport(self, live: _Live, stack: contextlib.AsyncExitStack) -> Transport:
        target = self._target
        if isinstance(target, StdioServerParameters):
            return stdio_client(target)
        if isinstance(target, str):
            http = httpx2.AsyncClient(
                transport=_UndeliveredHttp(live.undelivered),
                timeout=httpx2.Timeout(30.0, read=300.0),
            )
            await stack.enter_async_context(http)
            return streamable_http_client(target, http_client=http)
        return target()

    async def _client(self) -> tuple[Client, _Live]:
        """The open connection, opened (again) first when there is none."""
        if self._closed:
            raise McpUnavailableError(
                "the MCP server's connection was closed", context={"server": self.name}
            )
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            live = self._live
            if live is None or live.ended.is_set() or live.broken:
                self._live = None
                if live is not None:
                    await _end(live)
                live = self._live = await self._open()
            return live.ready.result(), live

    async def _open(self) -> _Live:
        live = _Live()
        live.task = asyncio.create_task(self._own(live), name=f"mcp-{self.name}")
        try:
            async with asyncio.timeout(self.connect_timeout):
                await asyncio.shield(live.ready)
        except TimeoutError as exc:
            await _end(live)
            raise McpUnavailableError(
                "the MCP server did not finish its initialisation in time",
                context={"server": self.name, "timeout": self.connect_timeout},
            ) from exc
        except (Exception, asyncio.CancelledError) as exc:
            await _end(live)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise McpUnavailableError(
                "the MCP server could not be started or reached",
                context={"server": self.name, "error": type(exc).__name__},
            ) from exc
        return live

    async def _own(self, live: _Live) -> None:
        """The connection's task: it enters and leaves the SDK client (anyio's scopes must be
        left by the task that entered them) and outlives no ``aclose``."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = _TrackedTransport(await self._transport(live, stack), live.sent)
                client = Client(transport, read_timeout_seconds=self.call_timeout)
                await stack.enter_async_context(client)
                live.ready.set_result(client)
                await live.stop.wait()
        except BaseException as exc:  # a transport that fails ends this connection only
            if not live.ready.done():
                if isinstance(exc, asyncio.CancelledError):
                    live.ready.cancel()
                else:
                    live.ready.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError) and live.stop.is_set():
                return
            if not isinstance(exc, Exception):
                raise
        finally:
            live.ended.set()

    async def list_tools(self) -> list[types.Tool]:
        """Every tool the server lists (all pages), at most ``MAX_TOOLS``."""
        client, _ = await self._client()
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            try:
                async with asyncio.timeout(self.call_timeout):
                    page = await client.list_tools(cursor=cursor)
            except (MCPError, ValidationError) as exc:  # a listing that is not valid MCP
                raise McpError(
                    "the server's tool listing could not be read",
                    context={"server": self.name, "error": type(exc).__name__},
                ) from exc
            tools.extend(page.tools)
            if len(tools) > MAX_TOOLS:
                raise McpToolDefinitionError(
                    f"the server lists more than {MAX_TOOLS} tools",
                    context={"server": self.name, "limit": MAX_TOOLS},
                )
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise McpToolDefinitionError(
            "the server's tool listing does not end", context={"server": self.name}
        )

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        key: str | None = None,
        progress: ProgressFnT | None = None,
    ) -> tuple[types.CallToolResult | BaseException, bool]:
        """Call the tool; ``(result or error, sent)``. ``sent`` says whether the request (its
        ``key`` in ``_meta``) was handed to the transport: if not, the server never saw it.

        A connection found ended before the request left is reopened and the call made once
        more (nothing was sent). Opening may raise ``McpUnavailableError`` (nothing was sent).
        Any other error is returned, not raised, with ``sent``: the caller decides what it
        proves. ``progress`` gets the server's progress notifications for the call."""
        outcome, sent = await self._call_once(name, arguments, key, progress)
        if isinstance(outcome, BaseException) and not sent and key is not None:
            return await self._call_once(name, arguments, key, progress)
        if isinstance(outcome, BaseException) and key is None and _lost(outcome):
            return await self._call_once(name, arguments, key, progress)
        return outcome, sent

    async def _call_once(
        self, name: str, arguments: dict[str, Any], key: str | None, progress: ProgressFnT | None
    ) -> tuple[types.CallToolResult | BaseException, bool]:
        client, live = await self._client()
        meta = cast("RequestParamsMeta", {IDEMPOTENCY_META_KEY: key}) if key is not None else None
        call = asyncio.ensure_future(
            client.call_tool(
                name,
                arguments,
                read_timeout_seconds=self.call_timeout,
                progress_callback=progress,
                meta=meta,
            )
        )
        ended = asyncio.ensure_future(live.ended.wait())
        try:
            await asyncio.wait({call, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            if not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
        sent = key is not None and key in live.sent and key not in live.undelivered
        if key is not None:
            live.sent.discard(key)
            live.undelivered.discard(key)
        if call.cancelled():
            live.broken = True
            return ConnectionError("the MCP connection ended during the call"), sent
        error = call.exception()
        if error is not None:
            live.broken = live.broken or _lost(error)
            return error, sent
        return call.result(), sent


def _lost(error: BaseException) -> bool:
    """The connection ended (or never answers again): it must be opened anew."""
    if isinstance(error, MCPError):
        return error.code == types.CONNECTION_CLOSED
    return not isinstance(error, ValueError | TypeError)


async def _end(live: _Live) -> None:
    live.stop.set()
    task = live.task
    if task is None:
        return
    if not live.ready.done():
        task.cancel()
    with contextlib.suppress(BaseException):
        await task
