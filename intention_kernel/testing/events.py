"""``EventCollector``: an ``EventSink`` that keeps what it is given, for assertions."""

from __future__ import annotations

from collections.abc import Sequence

from ..contracts.events import KernelEvent

__all__ = ["EventCollector"]


class EventCollector:
    def __init__(self) -> None:
        self.events: list[KernelEvent] = []

    async def publish(self, events: Sequence[KernelEvent]) -> None:
        self.events.extend(events)

    def of_type(self, type: str) -> list[KernelEvent]:
        return [e for e in self.events if e.type == type]

    def for_turn(self, turn_id: str) -> list[KernelEvent]:
        return [e for e in self.events if e.turn_id == turn_id]

    def types(self, turn_id: str | None = None) -> list[str]:
        events = self.events if turn_id is None else self.for_turn(turn_id)
        return [e.type for e in events]

    def clear(self) -> None:
        self.events.clear()
