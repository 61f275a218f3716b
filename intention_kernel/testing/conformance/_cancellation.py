"""Cancellation, timeouts and lost writes: the explorer (``explorer``) run over the adapter.

Every test enumerates every position its fault kind has on every turn shape (no effect, one,
two, two concurrent effects), with a duplicate delivery of the same turn on a second adapter
instance, and requires zero invariant violations. ``campaign`` runs the same cases at scale.
"""

from __future__ import annotations

from ._explorer import Kind, explore
from ._support import ConformanceHarness, conformance_test

__all__ = ["Cancellation"]


async def _explore(harness: ConformanceHarness, kinds: tuple[Kind, ...]) -> None:
    store = await harness.open()
    duplicate = await harness.open()
    report = await explore(store, duplicate=duplicate, name=type(harness).__name__, kinds=kinds)
    assert report.injected > 0, "the explorer injected nothing"
    assert report.violations == [], "\n".join(report.violations[:20])


class Cancellation:
    @conformance_test
    async def test_cancellation_at_every_await(self, harness: ConformanceHarness) -> None:
        """The caller cancelled at each suspension: committed turns replay, nothing hidden."""
        await _explore(harness, ("cancel",))

    @conformance_test
    async def test_turn_timeout_at_every_await(self, harness: ConformanceHarness) -> None:
        """An ``asyncio.timeout`` around the turn expiring at each suspension."""
        await _explore(harness, ("timeout",))

    @conformance_test
    async def test_effect_timeout_at_every_stage(self, harness: ConformanceHarness) -> None:
        """A capability's own timeout around ``run_effect`` at each stage of the effect."""
        await _explore(harness, ("effect_timeout",))

    @conformance_test
    async def test_lost_write_at_every_write(self, harness: ConformanceHarness) -> None:
        """Each write of the turn lost before or after it applied, once or for good."""
        await _explore(harness, ("lost_write",))
