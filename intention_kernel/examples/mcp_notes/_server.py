"""The example's MCP server: notes kept in a JSON file, over stdio, with the official SDK.

Why it honours the idempotency key: it shows what a server can do with the key the kernel
sends in ``_meta`` (``io.intention-kernel/idempotency-key``): a second call with the same key
returns the first call's note instead of adding another. Run it with
``python -m intention_kernel.examples.mcp_notes._server --state DIR``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

KEY = "io.intention-kernel/idempotency-key"

notes = MCPServer("notes", log_level="WARNING")
_state = Path(".")


class Note(BaseModel):
    note_id: str
    title: str
    body: str


def _load() -> dict[str, Any]:
    path = _state / "notes.json"
    return json.loads(path.read_text()) if path.exists() else {"notes": [], "keys": {}}


def _save(data: dict[str, Any]) -> None:
    path = _state / "notes.json"
    path.with_suffix(".tmp").write_text(json.dumps(data))
    path.with_suffix(".tmp").replace(path)


@notes.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def list_notes() -> str:
    """List every note with its id and title."""
    found = _load()["notes"]
    return "\n".join(f"{n['note_id']}: {n['title']}" for n in found) or "There are no notes."


@notes.tool(annotations=types.ToolAnnotations(destructive_hint=False, open_world_hint=False))
def add_note(title: str, body: str, ctx: Context) -> Note:
    """Add a note with a title and a body."""
    data = _load()
    key = (ctx.request_context.meta or {}).get(KEY)
    if isinstance(key, str) and key in data["keys"]:
        return Note(**data["keys"][key])  # the same operation again: the same note
    note = {"note_id": f"n{len(data['notes']) + 1}", "title": title, "body": body}
    data["notes"].append(note)
    if isinstance(key, str):
        data["keys"][key] = note
    _save(data)
    return Note(**note)


def main() -> None:
    global _state
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state", required=True, help="directory of notes.json")
    _state = Path(parser.parse_args().state)
    notes.run()


if __name__ == "__main__":
    main()
