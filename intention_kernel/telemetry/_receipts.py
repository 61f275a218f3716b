"""The ``ik.receipts.uncertain`` gauge: receipts waiting for an operator, as the store says."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Protocol

from ..contracts.receipts import EffectReceipt, ReceiptStatus
from . import _otel


class ReceiptLister(Protocol):
    """The store's operator query this needs (every ``DurabilityStore`` has it)."""

    async def list_receipts(
        self, *, status: ReceiptStatus | None = None, thread_id: str | None = None, limit: int = 100
    ) -> list[EffectReceipt]: ...


class UncertainReceipts:
    """The ``ik.receipts.uncertain`` gauge: receipts waiting for an operator, as the store
    says (``list_receipts(status=UNCERTAIN)``: uncertain ones and interrupted ``prepared``
    ones), so every process that runs it reports the same number.

    The gauge reports what the last ``refresh()`` read (nothing before the first one): call it
    on a schedule, or run ``watch(interval)`` as a task. A count at ``limit`` means "at least".
    Why not count in the turns: a receipt becomes uncertain in one process and is reconciled
    in another (an operator's command line), so only the store knows how many are left.
    """

    def __init__(
        self, store: ReceiptLister, *, meter_provider: object | None = None, limit: int = 1000
    ) -> None:
        self.store = store
        self.limit = limit
        self.count: int | None = None
        if _otel.AVAILABLE:
            meter = _otel.library_meter(meter_provider)
            meter.create_observable_gauge(
                "ik.receipts.uncertain",
                callbacks=[self._observe],
                unit="{receipt}",
                description="Receipts waiting for an operator (capped at the query limit).",
            )

    async def refresh(self) -> int:
        """Read the store now; returns the count the gauge reports from now on."""
        found = await self.store.list_receipts(status=ReceiptStatus.UNCERTAIN, limit=self.limit)
        self.count = len(found)
        return self.count

    async def watch(self, interval: float = 30.0) -> None:
        """Refresh every ``interval`` seconds until cancelled; a failed read keeps the last
        count (a store outage must not stop the gauge)."""
        while True:
            with contextlib.suppress(Exception):
                await self.refresh()
            await asyncio.sleep(interval)

    def _observe(self, options: _otel.CallbackOptions) -> Iterable[_otel.Observation]:
        return [] if self.count is None else [_otel.Observation(self.count)]
