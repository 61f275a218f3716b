"""``EventSink``: where the kernel hands its (already redacted) events after a turn ends.

The outbox is the durable channel; sinks are the live one (tracing, test collectors). A sink
that raises does not undo a committed turn: the kernel ignores sink failures after commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .events import KernelEvent

__all__ = ["EventSink"]


class EventSink(Protocol):
    async def publish(self, events: Sequence[KernelEvent]) -> None: ...
