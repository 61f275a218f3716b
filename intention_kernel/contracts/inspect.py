"""``StoreInspector``: the operator's read and retention queries, apart from ``DurabilityStore``.

Why a separate protocol (named apart from ``OutboxSource.prune``, which drops delivered events
only): the turn boundary must stay small enough for any adapter to get right;
listing threads, counting, pruning and lease probing are operator work that a store may offer
on top. ``prune_records`` never removes a live obligation: an uncertain or prepared receipt (and the
turn that made it), a thread's latest checkpoint (the turn that holds it, with its pending
interaction and agenda), or an undelivered or dead outbox event.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = [
    "LeaseInfo",
    "PruneReport",
    "SchemaInfo",
    "StoreInspector",
    "StoreStatus",
    "ThreadSummary",
]


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One thread as listed: its head (if it committed a turn) and its open receipts."""

    thread_id: str
    revision: int = 0
    head_turn_id: str | None = None
    fingerprint: str | None = None
    turns: int = 0
    last_commit_at: datetime | None = None
    uncertain_receipts: int = 0
    """``uncertain`` receipts plus interrupted ``prepared`` ones (no live lease holder)."""
    corrupt: str | None = None
    """Why the thread's head checkpoint cannot be read back (its turn row is missing, its
    text is not JSON or has no agent fingerprint), or ``None``. A listing reports such a
    thread (``fingerprint`` ``None``) and carries on; loading it raises
    ``CheckpointCorruptError``."""
    pending_interaction: str | None = None
    """The ``kind`` of the head checkpoint's active interaction (a confirmation or a question
    the thread waits on), as recorded when the head was committed; ``None`` without one."""


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    """The store's schema version against what this code writes."""

    version: int
    supported: int
    pending: tuple[str, ...] = ()
    """Human-readable names of the migrations that would run."""


@dataclass(frozen=True, slots=True)
class StoreStatus:
    schema_version: int
    threads: int
    turns: int
    uncertain_receipts: int
    """``uncertain`` receipts plus interrupted ``prepared`` ones (no live lease holder)."""
    undelivered_events: int
    dead_events: int
    backend: str
    corrupt_threads: int = 0
    """Threads whose head checkpoint cannot be read back (see ``ThreadSummary.corrupt``);
    counting them reads every head document, so this query grows with the store."""


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """Whether a thread's lease is held now, and what the store knows about the holder."""

    thread_id: str
    held: bool
    epoch: int | None = None
    """The fencing token of the latest acquisition (``None``: never acquired)."""
    holder: str | None = None
    """Who holds it, when the store can tell (e.g. ``pid 1234``)."""
    since: datetime | None = None
    expires_at: datetime | None = None
    """``None`` when the lease has no deadline (e.g. released only when the holder exits)."""
    mechanism: str = ""


@dataclass(slots=True)
class PruneReport:
    """What ``prune_records`` removed (or would, in a dry run) and what it kept on purpose."""

    cutoff: datetime
    dry_run: bool
    turns: list[tuple[str, str]] = field(default_factory=list)
    """``(thread_id, turn_id)`` of the turn records removed."""
    events: list[int] = field(default_factory=list)
    """Outbox positions of the delivered events removed."""
    kept_turns: int = 0
    """Old turn records kept because they hold a live obligation."""


@runtime_checkable
class StoreInspector(Protocol):
    """Operator queries a store may implement next to ``DurabilityStore``."""

    async def list_threads(
        self,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
        uncertain: bool | None = None,
        pending: bool | None = None,
        corrupt: bool | None = None,
        fingerprint_not_in: Collection[str] | None = None,
    ) -> list[ThreadSummary]:
        """Threads in id order (those with commits or receipts), after the cursor ``after``.

        Filters combine with AND; ``None`` does not filter. ``uncertain``: whether
        ``uncertain_receipts > 0``; ``pending``: whether ``pending_interaction`` is set;
        ``corrupt``: whether the head cannot be read back; ``fingerprint_not_in``: only threads
        with a head whose agent fingerprint (as committed) is not one of these.
        """
        ...

    async def store_status(self) -> StoreStatus: ...

    async def schema_info(self) -> SchemaInfo: ...

    async def lease_info(self, thread_id: str) -> LeaseInfo:
        """Probe the lease without waiting for it and without disturbing a holder."""
        ...

    async def prune_records(self, *, older_than: datetime, dry_run: bool = False) -> PruneReport:
        """Remove turn records committed and events delivered before ``older_than``, keeping
        every live obligation (see the module docstring)."""
        ...
