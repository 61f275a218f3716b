"""``stdout://``: JSON lines on standard output, for development and piping into other tools."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import BinaryIO
from urllib.parse import SplitResult

from ...contracts.events import KernelEvent
from ...contracts.sinks import PublishOutcome
from ._url import encode_event, invalid, query

__all__ = ["StdoutSink", "from_url"]


class StdoutSink:
    """Writes one JSON line per event and flushes per batch (an ack is a flushed write)."""

    keeps_order = True
    """One write per call, in order: the relay may hand it several events of a thread."""

    def __init__(self, stream: BinaryIO | None = None) -> None:
        self._stream = stream

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        stream = self._stream or sys.stdout.buffer
        try:
            stream.write(b"".join(encode_event(event) + b"\n" for event in events))
            stream.flush()
        except OSError as exc:
            return [PublishOutcome.unavailable(f"stdout: {exc.strerror}")] * len(events)
        return [PublishOutcome.ok()] * len(events)

    async def close(self) -> None:
        return None


def from_url(url: SplitResult) -> StdoutSink:
    if url.netloc or url.path not in ("", "/"):
        raise invalid(url, "stdout:// takes no host or path")
    query(url, allowed=())
    return StdoutSink()
