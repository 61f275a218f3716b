"""``FlowStorage``: the optional storage role of budget counters and provider slots.

Every member is one short transaction on the store's clock (see ``contracts.flow`` for the
rules and ``_flow_rules`` for the decisions). Nothing here is fenced by a thread lease: the
counters belong to no thread, and each change is atomic on its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from ..contracts.flow import (
    BudgetLine,
    BudgetUsage,
    LimitOverride,
    ProviderStatus,
    Reserved,
    SlotAnswer,
    SlotRequest,
)

__all__ = ["FlowStorage"]


class FlowStorage(Protocol):
    """The storage side of ``Counters`` (``store.counters``)."""

    async def reserve(
        self, line: BudgetLine, tokens: int, cost: float, reservation_id: str
    ) -> Reserved:
        """In one transaction: the line's counter in the window of the store's clock (created
        empty), the limits in force (``_flow_rules.limits_in_force``); if ``admits``, add the
        amounts to ``reserved``, count the call and store the reservation; else write nothing."""
        ...

    async def settle(self, reservation_id: str, tokens: int, cost: float) -> bool:
        """In one transaction: delete the reservation and move its counter's amounts from
        ``reserved`` to ``used`` at the given real amounts. ``False`` (nothing changed) for an
        unknown or already settled reservation, so a repeated settle counts once."""
        ...

    async def usage(self, budget: str | None, key: str | None, limit: int) -> list[BudgetUsage]:
        """Counters newest window first, then by budget and key, filtered by the arguments
        that are not ``None``, with the limits in force."""
        ...

    async def set_limit(self, override: LimitOverride) -> LimitOverride:
        """Store (or replace) the operator's limits of ``(budget, key)``; ``set_at`` from the
        store's clock."""
        ...

    async def limits(self, budget: str | None) -> list[LimitOverride]:
        """The operators' limits by budget and key."""
        ...

    async def acquire_slot(self, request: SlotRequest) -> SlotAnswer:
        """In one transaction: drop expired slots and waiters; decide with
        ``_flow_rules.slot_answer``; on a grant, take (or renew) the slot for ``ttl`` seconds,
        count the start and leave the queue; else join the queue (or keep the place) until
        the wait plus ``WAITER_GRACE``."""
        ...

    async def release_slot(self, provider: str, holder: str) -> None:
        """Give the slot back and leave the queue (either may be absent)."""
        ...

    async def cool_down(self, provider: str, seconds: float) -> datetime:
        """Cool the provider down until ``now + seconds`` unless it already is for longer;
        returns the end of the cool-down in force."""
        ...

    async def providers(self) -> list[ProviderStatus]:
        """Every provider with a live slot, a waiter, a start this minute or a cool-down."""
        ...
