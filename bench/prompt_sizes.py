"""Prompt bytes per turn against catalog size, with and without the capability selection step.

For agents of 10, 50 and 200 capabilities (each with its own three-field input schema, a
description and guidance), runs the same short conversation with the scripted model on the
memory adapter and sums, per turn, the bytes of every model request the kernel sent (system
text + input JSON + answer schema, as ``model.invoked`` records them):

- ``every schema``: selection off (``select_above`` past the catalog), so each ``interpret``
  carries every capability's full entry and schema, as before bounded prompts;
- ``selected``: the default ``KernelLimits`` (selection past 24 capabilities, at most 6
  chosen), so ``interpret`` carries only the chosen capabilities and ``select`` their summaries.

And the cost of the tool loop: one turn whose model asks to see its step's result and plans one
more step each round (``more``), for 1 to ``max_rounds`` rounds, on each catalog with the
default limits: model calls per turn and the bytes of each round's ``interpret`` request (each
later round carries the results of the steps before it), plus ``select`` and ``compose``.

Run:  .venv/bin/python bench/prompt_sizes.py
Writes bench/results/prompt_sizes.json.
"""

from __future__ import annotations

import asyncio
import json
import platform
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, JsonValue, create_model

from intention_kernel.contracts import ModelRequest
from intention_kernel.kernel import (
    CapabilityContext,
    Completed,
    Guidance,
    Kernel,
    KernelLimits,
    define_agent,
    define_capability,
)
from intention_kernel.testing import EventCollector, MemoryDurability, ScriptedModelGateway

RESULTS = Path(__file__).parent / "results" / "prompt_sizes.json"
SIZES = (10, 50, 200)
TURNS = ("please run task 3", "now task 7 for me", "and task 1 again")
TASKS = ("select", "interpret", "repair", "compose")


class Done(BaseModel):
    ok: bool


async def _run(context: CapabilityContext, query: BaseModel) -> Completed:
    return Completed(output=Done(ok=True), text="Done.")


def catalog(n: int) -> list[Any]:
    caps = []
    for i in range(n):
        fields: dict[str, Any] = {
            f"item_{i}": (str, Field(description=f"what task {i} works on")),
            f"count_{i}": (int, Field(ge=1, le=99, description="how many")),
            f"note_{i}": (str | None, Field(default=None, description="anything else")),
        }
        caps.append(
            define_capability(
                id=f"tasks.task{i}",
                version="1.0.0",
                description=f"Run task number {i} on an item.",
                input=create_model(f"Task{i}Input", **fields),
                output=Done,
                guidance=Guidance(when_to_use=f"the user asks for task {i}"),
                execute=_run,
            )
        )
    return caps


def _number(text: JsonValue) -> int:
    return int("".join(ch for ch in str(text) if ch.isdigit()) or 0)


def select(request: ModelRequest) -> JsonValue:
    return {"capabilities": [f"tasks.task{_number(request.input['text'])}"]}


def interpret(request: ModelRequest) -> JsonValue:
    n = _number(request.input["text"])
    item: dict[str, JsonValue] = {f"item_{n}": "the report", f"count_{n}": 2}
    return {"intentions": [{"capability": f"tasks.task{n}", "input": item}]}


def compose(request: ModelRequest) -> JsonValue:
    outcomes = request.input["outcomes"]
    assert isinstance(outcomes, list)
    cited: list[JsonValue] = [
        o["evidence_id"] for o in outcomes if isinstance(o, dict) and o["evidence_id"]
    ]
    return {"text": "Done.", "citations": cited}


async def measure(n: int, limits: KernelLimits) -> dict[str, Any]:
    """Bytes per turn (mean of the conversation's turns), in total and per task."""
    agent = define_agent(
        id=f"bench-{n}",
        version="1.0.0",
        description="Prompt size benchmark.",
        instructions="Run the tasks the user asks for.",
        capabilities=catalog(n),
    )
    gateway = ScriptedModelGateway({"select": select, "interpret": interpret, "compose": compose})
    durability = MemoryDurability()
    collector = EventCollector()
    kernel = Kernel(durability=durability, model=gateway, limits=limits, sinks=[collector])
    compiled = kernel.compile(agent)
    try:
        for turn, text in enumerate(TURNS):
            await compiled.run(thread_id="t1", turn_id=f"turn-{turn}", text=text)
    finally:
        await durability.close()
    per_task = dict.fromkeys(TASKS, 0)
    for event in collector.of_type("model.invoked"):
        task, size = event.data["task"], event.data["prompt_bytes"]
        assert isinstance(task, str) and isinstance(size, int)
        per_task[task] += size
    turns = len(TURNS)
    return {
        "bytes_per_turn": round(sum(per_task.values()) / turns),
        "by_task": {task: round(size / turns) for task, size in per_task.items() if size},
        "model_calls_per_turn": round(gateway.count() / turns, 2),
    }


def looping(rounds: int) -> Any:
    """An ``interpret`` that asks for one task per round, asking to see it while rounds remain."""

    def answer(request: ModelRequest) -> JsonValue:
        n = _number(request.input["text"])
        turn = request.input.get("round", 1)
        assert isinstance(turn, int)
        task = (n + turn - 1) % 10  # round k runs task n+k-1: always a chosen capability
        item: dict[str, JsonValue] = {f"item_{task}": "the report", f"count_{task}": 2}
        return {
            "intentions": [{"capability": f"tasks.task{task}", "input": item}],
            "more": turn < rounds,
        }

    return answer


def select_loop(request: ModelRequest) -> JsonValue:
    n = _number(request.input["text"])
    return {"capabilities": [f"tasks.task{(n + k) % 10}" for k in range(4)]}


async def measure_rounds(n: int, rounds: int) -> dict[str, Any]:
    """Model calls and request bytes of one turn of ``rounds`` rounds (by task, and per round
    for ``interpret``)."""
    agent = define_agent(
        id=f"bench-loop-{n}",
        version="1.0.0",
        description="Prompt size benchmark.",
        instructions="Run the tasks the user asks for.",
        capabilities=catalog(n),
    )
    gateway = ScriptedModelGateway(
        {"select": select_loop, "interpret": looping(rounds), "compose": compose}
    )
    durability = MemoryDurability()
    collector = EventCollector()
    kernel = Kernel(durability=durability, model=gateway, sinks=[collector])
    try:
        await kernel.compile(agent).run(thread_id="t1", turn_id="loop", text="please run task 3")
    finally:
        await durability.close()
    per_round: list[int] = []
    other = dict.fromkeys(("select", "compose"), 0)
    for event in collector.of_type("model.invoked"):
        task, size = event.data["task"], event.data["prompt_bytes"]
        assert isinstance(task, str) and isinstance(size, int)
        if task == "interpret":
            per_round.append(size)
        else:
            other[task] = other.get(task, 0) + size
    assert len(per_round) == rounds, per_round
    return {
        "rounds": rounds,
        "model_calls": gateway.count(),
        "interpret_bytes_by_round": per_round,
        "select_bytes": other["select"],
        "compose_bytes": other["compose"],
        "bytes_per_turn": sum(per_round) + sum(other.values()),
    }


async def main() -> dict[str, Any]:
    every = KernelLimits(select_above=10_000)
    selected = KernelLimits()
    rows = []
    for n in SIZES:
        rows.append(
            {
                "capabilities": n,
                "every_schema": await measure(n, every),
                "selected": await measure(n, selected),
            }
        )
    loops = [
        {"capabilities": n, "turns": [await measure_rounds(n, r) for r in range(1, 5)]}
        for n in SIZES
    ]
    return {
        "python": platform.python_version(),
        "loops": loops,
        "turns": list(TURNS),
        "select_above": selected.select_above,
        "select_at_most": selected.select_at_most,
        "rows": rows,
    }


def _kib(size: int) -> str:
    return f"{size / 1024:,.1f} KiB"


def table(report: dict[str, Any]) -> str:
    lines = [
        "| capabilities | every schema: bytes per turn | selected: bytes per turn | "
        "selected: `select` | selected: `interpret` | selected: `compose` | "
        "selected: model calls per turn |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        chosen = row["selected"]
        by_task = chosen["by_task"]
        lines.append(
            f"| {row['capabilities']} | {_kib(row['every_schema']['bytes_per_turn'])} | "
            f"{_kib(chosen['bytes_per_turn'])} | "
            f"{_kib(by_task['select']) if 'select' in by_task else '—'} | "
            f"{_kib(by_task['interpret'])} | {_kib(by_task['compose'])} | "
            f"{chosen['model_calls_per_turn']:g} |"
        )
    return "\n".join(lines)


def loop_table(report: dict[str, Any]) -> str:
    lines = [
        "| capabilities | rounds | model calls per turn | `interpret` bytes, round by round |"
        " bytes per turn | vs 1 round |",
        "|---:|---:|---:|---|---:|---:|",
    ]
    for row in report["loops"]:
        one = row["turns"][0]["bytes_per_turn"]
        for turn in row["turns"]:
            rounds = " / ".join(_kib(b) for b in turn["interpret_bytes_by_round"])
            lines.append(
                f"| {row['capabilities']} | {turn['rounds']} | {turn['model_calls']} | "
                f"{rounds} | {_kib(turn['bytes_per_turn'])} | "
                f"{turn['bytes_per_turn'] / one:.2f}x |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    result = asyncio.run(main())
    print(table(result))
    print()
    print(loop_table(result))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}", file=sys.stderr)
