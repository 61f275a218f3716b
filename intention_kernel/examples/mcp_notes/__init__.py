"""An agent on an MCP server: notes listed at once, notes added after the user said yes.

The server (``_server.py``) is a small notes server built with the official MCP SDK and
started as its own process over stdio; ``notes_agent(server)`` turns its tools into
capabilities with ``capabilities_from_mcp``; ``scripted_model()`` stands in for a language
model (no network, no API key). Needs the ``mcp`` extra. See docs/mcp.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.client.stdio import StdioServerParameters
from pydantic import JsonValue

from ...contracts.gateway import ModelRequest
from ...kernel import AgentDefinition, define_agent
from ...mcp import McpServer, capabilities_from_mcp
from ...testing import ScriptedModelGateway

__all__ = ["notes_agent", "scripted_model", "server_parameters"]


def server_parameters(state_dir: str | Path) -> StdioServerParameters:
    """How to start the example's server, keeping its notes in ``state_dir``."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "intention_kernel.examples.mcp_notes._server", "--state", str(state_dir)],
    )


async def notes_agent(server: McpServer) -> AgentDefinition:
    """The notes agent: every tool of ``server`` as a capability (``notes.list_notes`` is a
    read, ``notes.add_note`` a write held for consent)."""
    return define_agent(
        id="notes-desk",
        version="1.0.0",
        description="Keeps the user's notes.",
        capabilities=await capabilities_from_mcp(server),
    )


def _interpret(request: ModelRequest) -> JsonValue:
    text = str(request.input.get("text", "")).strip()
    lowered = text.lower().rstrip(".!")
    answer: JsonValue = {"option": lowered} if lowered in ("yes", "no") else None
    intentions: list[JsonValue] = []
    if "list" in lowered or "show" in lowered:
        intentions.append({"capability": "notes.list_notes", "input": {}})
    if lowered.startswith("note:"):
        title, _, body = text[5:].strip().partition(" - ")
        intentions.append(
            {"capability": "notes.add_note", "input": {"title": title, "body": body or title}}
        )
    return {"intentions": intentions, "answer": answer, "reply": None}


def _compose(request: ModelRequest) -> JsonValue:
    texts: list[str] = []
    cited: list[JsonValue] = []
    outcomes = request.input.get("outcomes")
    for outcome in outcomes if isinstance(outcomes, list) else []:
        if isinstance(outcome, dict):
            texts.append(str(outcome.get("text") or outcome.get("reason") or ""))
            if outcome.get("evidence_id"):
                cited.append(str(outcome["evidence_id"]))
    return {"text": " ".join(t for t in texts if t) or "How can I help?", "citations": cited}


def scripted_model() -> ScriptedModelGateway:
    """A keyword stand-in for the model: "show my notes" lists them, "note: Title - body"
    adds one, "yes"/"no" answer the open question."""
    script = {"interpret": _interpret, "repair": _interpret, "compose": _compose}
    return ScriptedModelGateway(script)
