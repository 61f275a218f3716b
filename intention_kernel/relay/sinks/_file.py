"""``file:///abs/path.jsonl``: append JSON lines to a local file, fsync'd before the ack."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO
from urllib.parse import SplitResult, unquote

from ...contracts.events import KernelEvent
from ...contracts.sinks import PublishOutcome
from ._url import encode_event, invalid, query

__all__ = ["FileSink", "from_url"]


class FileSink:
    """Appends one JSON line per event; one write + ``fsync`` per batch, so an acknowledged
    event survives a crash of this machine. Re-deliveries append the same event id again."""

    keeps_order = True
    """One write per call, in order: the relay may hand it several events of a thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO | None = None
        self._lock = asyncio.Lock()

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        data = b"".join(encode_event(event) + b"\n" for event in events)
        try:
            async with self._lock:
                await asyncio.to_thread(self._append, data)
        except OSError as exc:
            self._drop()
            reason = f"cannot append to {self.path}: {exc.strerror or type(exc).__name__}"
            return [PublishOutcome.unavailable(reason)] * len(events)
        return [PublishOutcome.ok()] * len(events)

    def _append(self, data: bytes) -> None:
        if self._file is None:
            self._file = self.path.open("ab")
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())

    def _drop(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    async def close(self) -> None:
        async with self._lock:
            self._drop()


def from_url(url: SplitResult) -> FileSink:
    if url.netloc not in ("", "localhost"):
        raise invalid(url, "file:// URLs name a local path: file:///abs/path.jsonl")
    query(url, allowed=())
    path = Path(unquote(url.path))
    if not url.path or not path.is_absolute() or url.path.endswith("/"):
        raise invalid(url, "file:// needs an absolute file path: file:///abs/path.jsonl")
    if path.is_dir():
        raise invalid(url, "the path is a directory")
    if not path.parent.is_dir():
        raise invalid(url, "the parent directory does not exist")
    return FileSink(path)
