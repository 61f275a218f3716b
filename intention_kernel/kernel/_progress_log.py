"""A running turn's progress, written to the store so a watcher in any process can follow it.

Why buffered and bounded: text arrives in many small pieces, and progress is advisory (the
committed result is the truth), so items are sent in batches by one writer task, at most
``MAX_BYTES`` per turn attempt, and a failed write is logged and dropped, never the turn's
failure. Each attempt starts with an ``attempt`` item, so a watcher knows to drop the text an
interrupted attempt showed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from pydantic import JsonValue

from ..contracts.inbox import TurnInbox
from ._states import StepStatus
from .streaming import (
    ConfirmationHeld,
    StepFinished,
    StepStarted,
    StreamItem,
    TextDelta,
    TurnCompleted,
)

__all__ = ["ATTEMPT", "MAX_BYTES", "ProgressLog", "decode_item", "encode_item"]

log = logging.getLogger("intention_kernel.inbox")

MAX_BYTES = 256 * 1024
"""Progress kept per turn attempt; later items are dropped (the result is still complete)."""
ATTEMPT = "attempt"
_FLUSH_SECONDS = 0.05


def encode_item(item: StreamItem) -> dict[str, JsonValue]:
    if isinstance(item, StepStarted):
        return {
            "type": "step_started",
            "step_id": item.step_id,
            "capability_id": item.capability_id,
        }
    if isinstance(item, StepFinished):
        return {
            "type": "step_finished",
            "step_id": item.step_id,
            "capability_id": item.capability_id,
            "status": str(item.status),
        }
    if isinstance(item, ConfirmationHeld):
        return {
            "type": "confirmation_held",
            "interaction_id": item.interaction_id,
            "kind": item.kind,
            "prompt": item.prompt,
            "options": list(item.options),
        }
    if isinstance(item, TextDelta):
        return {"type": "text", "text": item.text, "restarted": item.restarted}
    raise TypeError(f"not a progress item: {type(item).__name__}")  # TurnCompleted is not logged


def decode_item(item: dict[str, JsonValue]) -> StreamItem | None:
    """The stream item a stored entry holds; ``None`` for an attempt marker or anything
    unreadable (skipped: progress is advisory)."""
    try:
        kind = item["type"]
        if kind == "step_started":
            return StepStarted(str(item["step_id"]), str(item["capability_id"]))
        if kind == "step_finished":
            return StepFinished(
                str(item["step_id"]), str(item["capability_id"]), StepStatus(str(item["status"]))
            )
        if kind == "confirmation_held":
            options = item["options"]
            return ConfirmationHeld(
                str(item["interaction_id"]),
                str(item["kind"]),
                str(item["prompt"]),
                tuple(str(o) for o in options) if isinstance(options, list) else (),
            )
        if kind == "text":
            return TextDelta(str(item["text"]), bool(item["restarted"]))
    except (KeyError, ValueError, TypeError):
        return None
    return None


class ProgressLog:
    """Collects one turn attempt's stream items and writes them to the inbox in batches."""

    def __init__(self, inbox: TurnInbox, thread_id: str, turn_id: str, attempt: int) -> None:
        self._inbox = inbox
        self._key = (thread_id, turn_id)
        self._pending: list[str] = [json.dumps({"type": ATTEMPT, "attempt": attempt})]
        self._budget = MAX_BYTES
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
        self._lock = asyncio.Lock()
        self._writer = asyncio.get_running_loop().create_task(self._write_batches())

    def add(self, item: StreamItem) -> None:
        """The listener of the turn's ``Progress``: buffer, never block the turn."""
        if isinstance(item, TurnCompleted):
            return
        text = json.dumps(encode_item(item), ensure_ascii=False)
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > self._budget:
            self._budget = 0
            return
        self._budget -= size
        self._pending.append(text)
        self._wake.set()

    async def flush(self) -> None:
        """Write everything buffered so far (bounded; progress is advisory)."""
        while self._pending:
            await self._write()

    async def _write(self) -> None:
        """One batch, one writer at a time (the store numbers a turn's entries in order)."""
        async with self._lock:
            batch, self._pending = self._pending[:1000], self._pending[1000:]
            if not batch:
                return
            try:
                async with asyncio.timeout(5.0):
                    await self._inbox.append_progress(*self._key, batch)
            except Exception as exc:  # advisory: the turn goes on without it
                log.warning("progress of a turn not written: %s", type(exc).__name__)

    async def close(self) -> None:
        """Write what is buffered, then stop (bounded; a cancellation stops at once)."""
        self._closing.set()
        self._wake.set()
        try:
            async with asyncio.timeout(5.0):
                await asyncio.shield(self._writer)
        except TimeoutError:
            self._writer.cancel()
        except asyncio.CancelledError:
            self._writer.cancel()
            raise

    async def _write_batches(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._closing.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_FLUSH_SECONDS):
                        await self._closing.wait()  # gather what arrives meanwhile
            await self._write()
            if self._pending:
                self._wake.set()
            elif self._closing.is_set():
                return
