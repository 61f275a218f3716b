"""``context.report_progress``: a step's own progress as ``StepProgress`` stream items.

Advisory like every item before ``TurnCompleted``: shown to a streaming consumer in order,
before the step's end; not stored with the turn; recorded in the inbox's progress log so a
watcher in another process sees it too.
"""

from __future__ import annotations

import asyncio
import math

from pydantic import BaseModel, JsonValue

from intention_kernel.contracts import ModelRequest
from intention_kernel.kernel import (
    CapabilityContext,
    CompiledAgent,
    Completed,
    Kernel,
    StepFinished,
    StepProgress,
    TurnCompleted,
    define_agent,
    define_capability,
)
from intention_kernel.kernel._progress_log import decode_item, encode_item
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway


class Count(BaseModel):
    n: int


class Counted(BaseModel):
    n: int


async def count(context: CapabilityContext, query: Count) -> Completed:
    for i in range(1, query.n + 1):
        context.report_progress(f"counted {i}", progress=i, total=query.n)
    context.report_progress("x" * 2000, progress=math.nan, total=math.inf)
    return Completed(output=Counted(n=query.n), text=f"{query.n} counted.")


def agent() -> CompiledAgent:
    def interpret(request: ModelRequest) -> JsonValue:
        call: JsonValue = {"capability": "notes.count", "input": {"n": 3}}
        return {"intentions": [call], "answer": None, "reply": None}

    def compose(request: ModelRequest) -> JsonValue:
        return {"text": "3 counted.", "citations": []}

    definition = define_agent(
        id="counter",
        version="1.0.0",
        description="Counts.",
        capabilities=[
            define_capability(
                id="notes.count",
                version="1.0.0",
                description="Count notes.",
                input=Count,
                output=Counted,
                execute=count,
            )
        ],
    )
    model = ScriptedModelGateway({"interpret": interpret, "compose": compose})
    return Kernel(durability=MemoryDurability(), model=model).compile(definition)


async def test_progress_is_streamed_in_order_before_the_step_ends() -> None:
    items = [i async for i in agent().stream(thread_id="t1", turn_id="u1", text="count")]
    progress = [i for i in items if isinstance(i, StepProgress)]
    assert [(p.message, p.progress, p.total) for p in progress[:3]] == [
        ("counted 1", 1.0, 3.0),
        ("counted 2", 2.0, 3.0),
        ("counted 3", 3.0, 3.0),
    ]
    last = progress[3]  # bounded text; numbers that are not finite are left out
    assert len(last.message) == 500 and last.progress is None and last.total is None
    finished = next(i for i, x in enumerate(items) if isinstance(x, StepFinished))
    assert max(items.index(p) for p in progress) < finished
    assert isinstance(items[-1], TurnCompleted)


async def test_a_run_without_a_stream_drops_progress() -> None:
    result = await agent().run(thread_id="t1", turn_id="u1", text="count")
    assert result.response.text == "3 counted."
    assert "counted 1" not in str(result.response.model_dump())


def test_the_progress_log_keeps_progress_items() -> None:
    for item in (StepProgress("s1", "notes.count", "half", 1.0, 2.0), StepProgress("s", "c", "")):
        assert decode_item(encode_item(item)) == item


async def test_a_watcher_sees_a_workers_progress() -> None:
    desk = agent()
    await desk.submit(thread_id="t1", turn_id="u1", text="count")
    worker = desk.worker(claim_ttl=2.0, poll_interval=0.05)
    task = asyncio.create_task(worker.run())
    try:
        watched = [w.item async for w in desk.watch(thread_id="t1", turn_id="u1")]
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    progress = [i for i in watched if isinstance(i, StepProgress)]
    assert [p.message for p in progress[:3]] == ["counted 1", "counted 2", "counted 3"]
    assert isinstance(watched[-1], TurnCompleted)
