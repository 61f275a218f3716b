"""``HeadTexts``: the result texts this process committed last, shared by the turns and
history roles of one PostgreSQL store (a head equal to ours skips re-validation)."""

from __future__ import annotations

import sys
from typing import Any

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.turns import DurableTurnResult
from .._documents import decode_model, decode_own_model

__all__ = ["HeadTexts"]


class HeadTexts:
    """thread id -> the result text this process last committed on it, within ``limit``
    bytes. A head whose stored text is equal to it was written by our own encoder (see
    ``decode_own_model``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.written: dict[str, str] = {}
        self.written_bytes = 0

    def checkpoint(self, row: Any, thread_id: str) -> KernelCheckpoint | None:
        """The checkpoint of a row's ``head_result``."""
        if row is None or row["head_result"] is None:
            return None
        text = row["head_result"]
        decode = decode_own_model if self.written.get(thread_id) == text else decode_model
        result = decode(DurableTurnResult, text, what="checkpoint", thread_id=thread_id)
        return result.checkpoint

    def remember(self, thread_id: str, text: str) -> None:
        """Keep ``text`` as the thread's last commit, within ``limit`` (the least recently
        committed threads go first; a text larger than the bound is not kept)."""
        written = self.written
        old = written.pop(thread_id, None)
        if old is not None:
            self.written_bytes -= sys.getsizeof(old)
        size = sys.getsizeof(text)
        if size > self.limit:
            return
        self.written_bytes += size
        while self.written_bytes > self.limit:
            oldest = next(iter(written))
            self.written_bytes -= sys.getsizeof(written.pop(oldest))
        written[thread_id] = text
