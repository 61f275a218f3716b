"""The MCP tests' parts: the notes server as a process (stdio or HTTP), and an agent on it.

Nothing is mocked: the server is ``notes_server.py`` in its own process, reached through the
official SDK; the store is SQLite in the test's directory; only the model is scripted.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.client.stdio import StdioServerParameters
from pydantic import JsonValue

from intention_kernel.contracts import ModelRequest
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.kernel import CompiledAgent, Kernel, TurnResult, define_agent
from intention_kernel.mcp import McpServer, ServerTarget, capabilities_from_mcp
from intention_kernel.testing import ScriptedModelGateway

SERVER = Path(__file__).resolve().parent / "notes_server.py"
TRANSPORTS = ["stdio", "http"]

NOTE_RULES: dict[str, list[JsonValue]] = {
    "show note 7": [{"capability": "notes.lookup_note", "input": {"note_id": "7"}}],
    "add a milk note": [
        {"capability": "notes.add_note", "input": {"title": "milk", "body": "buy 2 litres"}}
    ],
    "delete note 3": [{"capability": "notes.delete_note", "input": {"note_id": "3"}}],
    "archive note 5": [{"capability": "notes.archive_note", "input": {"note_id": "5"}}],
    "pin note 9": [{"capability": "notes.pin_note", "input": {"note_id": "9"}}],
    "export everything": [{"capability": "notes.export_notes", "input": {"size": 100_000}}],
    "picture of note 2": [{"capability": "notes.note_picture", "input": {"note_id": "2"}}],
}


def scripted_model(rules: Mapping[str, Sequence[JsonValue]] = NOTE_RULES) -> ScriptedModelGateway:
    """Intentions by exact text; "yes"/"no" answer the open interaction."""

    def interpret(request: ModelRequest) -> JsonValue:
        text = str(request.input.get("text", "")).strip().lower()
        answer: JsonValue = {"option": text} if text in ("yes", "no") else None
        return {"intentions": list(rules.get(text, [])), "answer": answer, "reply": None}

    def compose(request: ModelRequest) -> JsonValue:
        texts: list[str] = []
        cited: list[JsonValue] = []
        for outcome in request.input.get("outcomes") or []:  # type: ignore[union-attr]
            assert isinstance(outcome, dict)
            if outcome.get("text"):
                texts.append(str(outcome["text"]))
            elif outcome.get("reason"):
                texts.append(f"I could not do that: {outcome['reason']}")
            if outcome.get("evidence_id"):
                cited.append(str(outcome["evidence_id"]))
        return {"text": " ".join(texts) or "How can I help?", "citations": cited}

    return ScriptedModelGateway({"interpret": interpret, "repair": interpret, "compose": compose})


def executions(state: Path) -> list[dict[str, Any]]:
    """Every write the server executed, in order (its own record, across restarts)."""
    path = state / "executions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def stdio_target(state: Path, mode: str = "notes") -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[str(SERVER), "--state", str(state), "--mode", mode]
    )


@dataclass
class HttpServer:
    """The notes server over streamable HTTP on 127.0.0.1, on the port it chose itself."""

    process: asyncio.subprocess.Process
    url: str

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


@asynccontextmanager
async def http_server(state: Path) -> AsyncIterator[HttpServer]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SERVER),
        "--state",
        str(state),
        "--http",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    line = await process.stdout.readline()  # the server says its port once it is bound
    server = HttpServer(process, f"http://127.0.0.1:{int(line)}/mcp")
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def notes_target(transport: str, state: Path) -> AsyncIterator[ServerTarget]:
    if transport == "stdio":
        yield stdio_target(state)
    else:
        async with http_server(state) as server:
            yield server.url


@dataclass
class Desk:
    agent: CompiledAgent
    model: ScriptedModelGateway
    server: McpServer
    store: SQLiteDurability
    state: Path

    async def run(
        self, turn_id: str, text: str, selection: dict[str, JsonValue] | None = None
    ) -> TurnResult:
        return await self.agent.run(thread_id="t1", turn_id=turn_id, text=text, selection=selection)


@asynccontextmanager
async def notes_desk(
    target: ServerTarget, state: Path, *, call_timeout: float = 30.0
) -> AsyncIterator[Desk]:
    store = await SQLiteDurability.open(state / "desk.db")
    try:
        async with McpServer(target, name="notes", call_timeout=call_timeout) as server:
            caps = await capabilities_from_mcp(server)
            agent = define_agent(
                id="notes-desk", version="1.0.0", description="Keeps notes.", capabilities=caps
            )
            model = scripted_model()
            compiled = Kernel(durability=store, model=model).compile(agent)
            yield Desk(compiled, model, server, store, state)
    finally:
        await store.close()


def accept(result: TurnResult, option: str = "yes") -> dict[str, JsonValue]:
    interaction = result.checkpoint.interaction
    assert interaction is not None
    return {"interaction_id": interaction.id, "option": option}
