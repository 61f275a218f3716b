"""``DurableTurnResult``: what a store commits for one turn and hands back on replay."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .checkpoint import KernelCheckpoint
from .codec import StoredJson

__all__ = ["DurableTurnResult"]


class DurableTurnResult(BaseModel):
    """The committed outcome of ``(thread_id, turn_id)``.

    ``response`` is the observable result (its shape belongs to the caller, e.g. the kernel);
    ``checkpoint`` is the successor state committed with it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    thread_id: str
    turn_id: str
    trace_id: str
    response: StoredJson
    checkpoint: KernelCheckpoint
