"""The demo's cast: the store it runs on, the travel desk, and a conversation that prints."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from .contracts import DurabilityStore
from .contracts.gateway import ModelGateway
from .durability.sqlite import SQLiteDurability
from .examples.travel_desk import FakeHotelProvider, build_agent
from .kernel import CompiledAgent, Kernel, TurnResult

__all__ = ["ACTOR", "TENANT", "Conversation", "check", "line", "note", "open_store", "travel_desk"]

TENANT = "demo"
ACTOR = "ann@example.com"


async def open_store(directory: Path) -> tuple[DurabilityStore, str]:
    """The embedded default store (SQLite) in ``directory``; returns it and a description."""
    path = directory / "demo.db"
    return await SQLiteDurability.open(path), f"SQLite ({path})"


def travel_desk(
    store: DurabilityStore, model: ModelGateway | str, provider: Any = None
) -> tuple[CompiledAgent, Any]:
    provider = provider if provider is not None else FakeHotelProvider()
    kernel = Kernel(durability=store, model=model, ports={"hotels": provider})
    return kernel.compile(build_agent()), provider


class Conversation:
    """Runs turns and prints them as a transcript."""

    def __init__(self, agent: CompiledAgent, provider: FakeHotelProvider, thread: str) -> None:
        self.agent = agent
        self.thread = thread
        self.provider = provider
        self.turns = 0
        self.last: TurnResult | None = None

    async def say(self, text: str, **kw: Any) -> TurnResult:
        self.turns += 1
        return await self.turn(f"turn-{self.turns}", text, **kw)

    async def turn(
        self,
        turn_id: str,
        text: str,
        selection: Mapping[str, JsonValue] | None = None,
        *,
        show: bool = True,
    ) -> TurnResult:
        if show:
            if selection is not None:
                line("user", f'[presses "{selection["option"]}" on {selection["interaction_id"]}]')
            else:
                line("user", text)
        result = await self.agent.run(
            thread_id=self.thread,
            turn_id=turn_id,
            text=text,
            selection=selection,
            host_context={"actor": ACTOR, "tenant": TENANT},
        )
        if show:
            line("agent", result.response.text)
        self.last = result
        return result


def line(who: str, text: str) -> None:
    body = textwrap.wrap(text.replace("\n", " "), 88) or [""]
    print(f"   {who:>6} > {body[0]}")
    for more in body[1:]:
        print(f"   {'':>6}   {more}")


def note(text: str) -> None:
    print(f"   {'':>6}   [{text}]")


def check(condition: bool, what: str) -> None:
    if not condition:
        print(f"\nDEMO CHECK FAILED: {what}", file=sys.stderr)
        raise SystemExit(1)
