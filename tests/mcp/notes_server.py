"""A small MCP notes server, run as its own process by the MCP tests (stdio or HTTP).

``python tests/mcp/notes_server.py --state DIR [--http] [--mode notes|hang|bad-tools]``.

Every write records one line in ``DIR/executions.jsonl`` (tool, idempotency key, arguments)
*before* it answers: the tests count executions from that file, across server restarts. A
file ``DIR/drop-after`` makes the next write exit the process right after recording (the
answer is lost); ``DIR/hold`` makes it record and then never answer (a timeout). Over HTTP the
server binds 127.0.0.1 on a free port and prints the port on its first line.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

KEY = "io.intention-kernel/idempotency-key"
STATE = Path(".")
PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 24).decode()


class Note(BaseModel):
    note_id: str
    title: str


def record(tool: str, ctx: Context, arguments: dict[str, Any]) -> None:
    """One execution, durably, before anything can go wrong with the answer."""
    meta = ctx.request_context.meta or {}
    line = json.dumps({"tool": tool, "key": meta.get(KEY), "arguments": arguments})
    with open(STATE / "executions.jsonl", "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())
    drop = STATE / "drop-after"
    if drop.exists():
        drop.unlink()
        os._exit(7)


notes = MCPServer("notes", log_level="WARNING")


@notes.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def lookup_note(note_id: str) -> str:
    """Look up a note by its id."""
    return f"Note {note_id}: buy milk."


@notes.tool(annotations=types.ToolAnnotations(destructive_hint=False, open_world_hint=False))
async def add_note(title: str, body: str, ctx: Context) -> Note:
    """Add a note with a title and a body."""
    record("add_note", ctx, {"title": title, "body": body})
    if (STATE / "hold").exists():
        await anyio.sleep_forever()
    return Note(note_id=f"n-{len(title)}", title=title)


@notes.tool(annotations=types.ToolAnnotations(destructive_hint=True))
def delete_note(note_id: str, ctx: Context) -> str:
    """Delete a note for good."""
    record("delete_note", ctx, {"note_id": note_id})
    return f"Deleted note {note_id}."


@notes.tool()
def archive_note(note_id: str) -> str:
    """Archive a note."""
    raise ToolError(f"note {note_id} is locked by another editor")


@notes.tool()
def pin_note(note_id: str) -> str:
    """Pin a note to the top."""
    raise MCPError(types.INVALID_PARAMS, f"cannot pin {note_id}: unknown note")


@notes.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def export_notes(size: int) -> str:
    """Export every note as text."""
    return "x" * size


@notes.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def note_picture(note_id: str) -> list[Any]:
    """A picture of the note."""
    return [
        types.TextContent(text=f"A picture of note {note_id}."),
        types.ImageContent(data=PIXEL, mime_type="image/png"),
    ]


def bad_tools() -> Server[Any]:
    """A server whose listing breaks every rule a capability has."""
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    wide = {f"f{i}": {"type": "string", "description": "d" * 100} for i in range(900)}
    tools = [
        types.Tool(name="fine_tool", input_schema={"type": "object", "properties": {}}),
        types.Tool(name="bad schema", input_schema={"type": "object"}),
        types.Tool(name="invalid_schema", input_schema={"type": "object", "properties": 3}),
        types.Tool(
            name="enormous_schema",
            input_schema={"type": "object", "properties": wide},
        ),
        types.Tool(name="deep_schema", input_schema={"type": "object", "properties": {"d": deep}}),
        types.Tool(name="remote_ref", input_schema={"type": "object", "$ref": "https://x.test/s"}),
        types.Tool(name="sendEmail", input_schema={"type": "object"}),
        types.Tool(name="sendemail", input_schema={"type": "object"}),
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text="ok")])

    return Server("bad", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_http() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(notes.streamable_http_app(), log_level="warning")
    await uvicorn.Server(config).serve(sockets=[sock])


async def serve_bad() -> None:
    server = bad_tools()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    global STATE
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", required=True)
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--mode", default="notes", choices=["notes", "hang", "bad-tools"])
    args = parser.parse_args()
    STATE = Path(args.state)
    if args.mode == "hang":
        # Never answers: the client's initialisation must give up on its own.
        while True:
            time.sleep(3600)
    if args.mode == "bad-tools":
        anyio.run(serve_bad)
    elif args.http:
        anyio.run(serve_http)
    else:
        notes.run()


if __name__ == "__main__":
    main()
