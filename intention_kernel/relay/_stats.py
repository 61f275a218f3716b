"""What a relay reports: one batch (``BatchReport``) and its running totals (``RelayStats``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["BatchReport", "RelayStats"]


@dataclass(slots=True)
class BatchReport:
    """What one ``run_once()`` did."""

    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    dead_lettered: int = 0
    released: int = 0
    sink_unavailable: bool = False
    slow_claim: bool = False
    """The claim took so long that the batch was released unpublished (see the log)."""


@dataclass(slots=True)
class RelayStats:
    """Running totals of one relay, for logs and health checks."""

    batches: int = 0
    delivered: int = 0
    retried: int = 0
    dead_lettered: int = 0
    released: int = 0
    sink_outages: int = 0
    """Batches abandoned because the sink was unavailable."""
    source_errors: int = 0
    """Store calls that failed (the relay backs off and tries again)."""
    slow_claims: int = 0
    """Batches released unpublished because the claim used up the lease's publishing time."""
    consecutive_failures: int = 0
    """Outages or store errors in a row; 0 once a batch goes through."""
    last_error: str | None = None
    last_delivery_at: datetime | None = None
    recent: list[str] = field(default_factory=list)
    partitions: tuple[int, ...] = ()
    """The partitions served at the last lease renewal (a partitioned relay only)."""
