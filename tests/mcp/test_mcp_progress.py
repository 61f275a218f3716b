"""An MCP tool's progress notifications reach ``stream()`` as the running step's items.

The server (``progress_server.py``, its own process over stdio) reports each step of a read
and of a write; a streamed turn yields them as ``StepProgress`` items, in order, after the
step's ``StepStarted`` and before its ``StepFinished``. A turn that is run, not streamed,
shows nothing and loses nothing.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mcp.client.stdio import StdioServerParameters
from pydantic import JsonValue

from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.kernel import (
    CompiledAgent,
    Kernel,
    StepFinished,
    StepProgress,
    StepStarted,
    StreamItem,
    TurnCompleted,
    define_agent,
)
from intention_kernel.mcp import McpServer, capabilities_from_mcp

from .support import accept, scripted_model

SERVER = Path(__file__).resolve().parent / "progress_server.py"
RULES: dict[str, list[JsonValue]] = {
    "count my notes": [{"capability": "progress.count_notes", "input": {"n": 3}}],
    "import my notes": [{"capability": "progress.import_notes", "input": {"n": 4}}],
}


@asynccontextmanager
async def progress_desk(tmp: Path) -> AsyncIterator[CompiledAgent]:
    store = await SQLiteDurability.open(tmp / "desk.db")
    target = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    try:
        async with McpServer(target, name="progress") as server:
            agent = define_agent(
                id="progress-desk",
                version="1.0.0",
                description="Counts and imports notes.",
                capabilities=await capabilities_from_mcp(server),
            )
            yield Kernel(durability=store, model=scripted_model(RULES)).compile(agent)
    finally:
        await store.close()


def around_the_step(items: list[StreamItem], capability: str) -> list[StepProgress]:
    """The progress items, checked to sit between the step's start and its end."""
    kinds = [type(i).__name__ for i in items]
    started = next(i for i, x in enumerate(items) if isinstance(x, StepStarted))
    finished = next(i for i, x in enumerate(items) if isinstance(x, StepFinished))
    progress = [x for x in items if isinstance(x, StepProgress)]
    at = [i for i, x in enumerate(items) if isinstance(x, StepProgress)]
    assert at and started < min(at) and max(at) < finished, kinds
    assert all(p.capability_id == capability for p in progress)
    assert isinstance(items[-1], TurnCompleted)
    return progress


async def test_a_read_tools_progress_is_streamed_in_order(tmp_path: Path) -> None:
    async with progress_desk(tmp_path) as agent:
        items = [
            i async for i in agent.stream(thread_id="t1", turn_id="turn-1", text="count my notes")
        ]
        progress = around_the_step(items, "progress.count_notes")
        assert [(p.progress, p.total, p.message) for p in progress] == [
            (1.0, 3.0, "counted 1 of 3"),
            (2.0, 3.0, "counted 2 of 3"),
            (3.0, 3.0, "counted 3 of 3"),
        ]
        step = next(x for x in items if isinstance(x, StepStarted))
        assert {p.step_id for p in progress} == {step.step_id}
        result = items[-1]
        assert isinstance(result, TurnCompleted)
        assert "There are 3 notes." in result.result.response.text


async def test_a_write_tools_progress_is_streamed_after_consent(tmp_path: Path) -> None:
    async with progress_desk(tmp_path) as agent:
        proposed = await agent.run(thread_id="t1", turn_id="turn-1", text="import my notes")
        assert proposed.checkpoint.interaction is not None
        items = [
            i
            async for i in agent.stream(
                thread_id="t1", turn_id="turn-2", text="", selection=accept(proposed)
            )
        ]
        progress = around_the_step(items, "progress.import_notes")
        assert [p.progress for p in progress] == [1.0, 2.0, 3.0, 4.0]
        assert progress[-1].message == "imported 4 of 4"
        # Delivered again: the write is not called again, so nothing reports progress.
        again = [
            i
            async for i in agent.stream(
                thread_id="t1", turn_id="turn-2", text="", selection=accept(proposed)
            )
        ]
        assert not [x for x in again if isinstance(x, StepProgress)]


async def test_a_run_that_is_not_streamed_shows_no_progress_and_answers(tmp_path: Path) -> None:
    async with progress_desk(tmp_path) as agent:
        result = await agent.run(thread_id="t1", turn_id="turn-1", text="count my notes")
        assert "There are 3 notes." in result.response.text
        assert "counted" not in str(result.response.model_dump())
