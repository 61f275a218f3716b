"""A running turn's progress, written to the store so a watcher in any process can follow it.

Why buffered and bounded: text arrives in many small pieces, and progress is advisory (the
committed result is the truth), so items are sent in batches by one writer task, at most
``MAX_BYTES`` per turn attempt, and a failed write is logged and dropped, never the turn's
failure. Each attempt starts with an ``attempt`` item, so a watcher knows to drop the text an
interrupted attempt showed.
"""

from __future__ import annotations

import asyncio
import json
import logging

from pydantic import JsonValue

from ..contracts.inbox import TurnInbox
from ._states import StepStatus
from .streaming import (
    ConfirmationHeld,
    ProviderWait,
    RoundStarted,
    StepFinished,
    StepProgress,
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
MAX_ITEMS = 1000
"""Items one write carries (the store's limit per append or commit)."""
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
    if isinstance(item, StepProgress):
        return {
            "type": "step_progress",
            "step_id": item.step_id,
            "capability_id": item.capability_id,
            "message": item.message,
            "progress": item.progress,
            "total": item.total,
        }
    if isinstance(item, RoundStarted):
        return {"type": "round_started", "round": item.round}
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
    if isinstance(item, ProviderWait):
        return {
            "type": "provider_wait",
            "provider": item.provider,
            "reason": item.reason,
            "seconds": item.seconds,
        }
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
        if kind == "step_progress":
            done, total = item.get("progress"), item.get("total")
            return StepProgress(
                str(item["step_id"]),
                str(item["capability_id"]),
                str(item["message"]),
                None if done is None else float(done),  # type: ignore[arg-type]
                None if total is None else float(total),  # type: ignore[arg-type]
            )
        if kind == "round_started":
            return RoundStarted(int(item["round"]))  # type: ignore[arg-type]
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
        if kind == "provider_wait":
            seconds = float(item["seconds"])  # type: ignore[arg-type]
            return ProviderWait(str(item["provider"]), str(item["reason"]), seconds)
    except (KeyError, ValueError, TypeError):
        return None
    return None


class ProgressLog:
    """Collects one turn attempt's stream items and writes them to the inbox in batches.

    Nothing is written while a batch gathers (``_FLUSH_SECONDS``); a turn that commits within
    that time hands everything to its commit (``for_commit``) and writes no batch of its own."""

    def __init__(self, inbox: TurnInbox, thread_id: str, turn_id: str, attempt: int) -> None:
        self._inbox = inbox
        self._key = (thread_id, turn_id)
        self._pending: list[str] = [json.dumps({"type": ATTEMPT, "attempt": attempt})]
        self._text: list[str] = []  # text deltas not yet in ``_pending``: one item when they go
        self._restarted = False
        self._budget = MAX_BYTES
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._writer: asyncio.Task[None] | None = None

    def add(self, item: StreamItem) -> None:
        """The listener of the turn's ``Progress``: buffer, never block the turn. Text deltas
        that arrive between two writes become one item (a ``restarted`` one begins another)."""
        if isinstance(item, TurnCompleted):
            return
        if isinstance(item, TextDelta):
            if item.restarted:
                self._close_text()
                self._restarted = True
            self._text.append(item.text)
        else:
            self._close_text()
            self._keep(encode_item(item))
        if self._timer is None and self._writer is None:
            self._timer = asyncio.get_running_loop().call_later(_FLUSH_SECONDS, self._start)

    def _close_text(self) -> None:
        if self._text:
            text, self._text = "".join(self._text), []
            self._keep(encode_item(TextDelta(text, self._restarted)))
            self._restarted = False

    def _keep(self, item: dict[str, JsonValue]) -> None:
        text = json.dumps(item, ensure_ascii=False)
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > self._budget:
            self._budget = 0
            return
        self._budget -= size
        self._pending.append(text)

    def _start(self) -> None:
        self._timer = None
        self._writer = asyncio.get_running_loop().create_task(self._write_all())

    async def _write_all(self) -> None:
        try:
            while self._pending or self._text:
                await self._write()
        finally:
            self._writer = None

    async def for_commit(self) -> list[str]:
        """Hand the last batch to the turn's commit (``Progress.before_commit``), once any
        batch being written has landed (the store numbers a turn's entries in order)."""
        self._stop_timer()
        self._close_text()
        while len(self._pending) > MAX_ITEMS:
            await self._write()
        async with self._lock:
            self._close_text()
            batch, self._pending = self._pending[:MAX_ITEMS], self._pending[MAX_ITEMS:]
        return batch

    async def _write(self) -> None:
        """One batch, one writer at a time (the store numbers a turn's entries in order)."""
        async with self._lock:
            self._close_text()
            batch, self._pending = self._pending[:MAX_ITEMS], self._pending[MAX_ITEMS:]
            if not batch:
                return
            try:
                async with asyncio.timeout(5.0):
                    await self._inbox.append_progress(*self._key, batch)
            except Exception as exc:  # advisory: the turn goes on without it
                log.warning("progress of a turn not written: %s", type(exc).__name__)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def close(self) -> None:
        """Write what is still buffered (a turn that ended without its commit), then stop
        (bounded; a cancellation stops at once)."""
        self._stop_timer()
        self._close_text()
        if self._writer is None and not self._pending:
            return
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_all())
        writer = self._writer
        try:
            async with asyncio.timeout(5.0):
                await asyncio.shield(writer)
        except TimeoutError:
            writer.cancel()
        except asyncio.CancelledError:
            writer.cancel()
            raise
