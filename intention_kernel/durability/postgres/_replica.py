"""Reads a hot standby answers: the rule for a store opened with a read pool (``read=``).

Listings go to the read pool and may lag the primary by the replication delay. A lookup of a
settled fact (a committed turn, a finished request, the progress of a committed turn) reads the
pool first, and the primary when the pool does not show it settled: a committed turn never
changes, so a standby that has it answers what the primary would; one that lags sends the
lookup on, and nothing is decided on a stale read (a turn is never run because a standby had
not seen its commit). A read pool that is down or busy sends it on too. Everything else (leases,
writes, the checkpoint a thread goes on from) is the primary's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ...contracts.errors import DurabilityError
from ._connection import PgConnection

__all__ = ["from_reads", "settled_first"]

log = logging.getLogger("intention_kernel.postgres")

T = TypeVar("T")


async def from_reads(reads: PgConnection, read: Callable[[PgConnection], Awaitable[T]]) -> T | None:
    """``read`` on the read pool; ``None`` when the pool did not answer (down or busy: a
    retryable error), so the caller goes to the primary instead."""
    try:
        return await read(reads)
    except DurabilityError as exc:
        if not exc.retryable:
            raise
        log.debug("the read pool did not answer (%s); going to the primary", exc.code)
        return None


async def settled_first(
    reads: PgConnection,
    primary: PgConnection,
    read: Callable[[PgConnection], Awaitable[T]],
    settled: Callable[[T], bool],
) -> T:
    """``read`` on the read pool if it shows the fact ``settled``, else on the primary (once,
    when the two are one pool)."""
    if reads is not primary:
        found = await from_reads(reads, read)
        if found is not None and settled(found):
            return found
    return await read(primary)
