"""``list_threads`` filters against a reference model: every store gives the same answers.

Random sets of threads (with or without a head, a pending interaction, an uncertain receipt, a
corrupt head, one of a few agent fingerprints) are written through the public API, then every
filter combination and page size is compared with the model. Each example writes under its own
id prefix, so one store serves every example and ``prefix`` is exercised on the way.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ...contracts.checkpoint import Interaction, KernelCheckpoint
from ...contracts.durability import DurabilityStore, TurnScope
from ...contracts.errors import EffectUncertainError, InvalidInputError
from ...contracts.inspect import StoreInspector, ThreadSummary
from ...contracts.turns import DurableTurnResult
from ._support import ConformanceHarness, Provider, conformance_test, effect

__all__ = ["ThreadFilters"]

_FINGERPRINTS = ("fp-a", "fp-b", "fp-c")
_KINDS = (None, "confirmation", "question")
_BROKEN_HEAD = '{"thread_id": "x", "checkpoint": {"rev'


@dataclass(frozen=True)
class _Thread:
    head: bool
    fingerprint: str
    kind: str | None
    uncertain: bool
    corrupt: bool


_threads = st.builds(
    _Thread,
    head=st.booleans(),
    fingerprint=st.sampled_from(_FINGERPRINTS),
    kind=st.sampled_from(_KINDS),
    uncertain=st.booleans(),
    corrupt=st.booleans(),
).filter(lambda t: t.head or t.uncertain)  # a thread is listed once it wrote something


async def _commit(store: DurabilityStore, thread_id: str, model: _Thread) -> None:
    async def operation(scope: TurnScope) -> None:
        interaction = (
            None
            if model.kind is None
            else Interaction(id="ix-1", kind=model.kind, prompt="Go on?", turn_id=scope.turn_id)
        )
        checkpoint = KernelCheckpoint(
            revision=1, agent_fingerprint=model.fingerprint, interaction=interaction
        )
        result = DurableTurnResult(
            thread_id=thread_id,
            turn_id="turn-1",
            trace_id="trace-1",
            response={},
            checkpoint=checkpoint,
        )
        await scope.commit(result, [])

    await store.with_turn(thread_id, "turn-1", operation)


async def _lose_a_charge(store: DurabilityStore, thread_id: str) -> None:
    """A turn whose provider call ends without an answer: an uncertain receipt, no commit."""
    provider = Provider()

    async def operation(scope: TurnScope) -> None:
        await scope.run_effect(effect("k1"), provider.raising(TimeoutError("gateway")))

    with pytest.raises(EffectUncertainError):
        await store.with_turn(thread_id, "turn-2", operation)


def _expected(model: dict[str, _Thread], filters: dict[str, Any], after: str | None) -> list[str]:
    def keeps(t: _Thread) -> bool:
        pending = t.head and t.kind is not None
        corrupt = t.head and t.corrupt
        if filters.get("uncertain") is not None and t.uncertain != filters["uncertain"]:
            return False
        if filters.get("pending") is not None and pending != filters["pending"]:
            return False
        if filters.get("corrupt") is not None and corrupt != filters["corrupt"]:
            return False
        excluded = filters.get("fingerprint_not_in")
        return excluded is None or (t.head and t.fingerprint not in excluded)

    return [i for i in sorted(model) if (after is None or i > after) and keeps(model[i])]


_FILTERS: list[dict[str, Any]] = [
    {
        key: value
        for key, value in zip(
            ("uncertain", "pending", "corrupt", "fingerprint_not_in"), combo, strict=True
        )
        if value is not None
    }
    for combo in itertools.product(
        (None, True, False), (None, True, False), (None, True, False), (None, ("fp-a",))
    )
]
"""Every combination of the filters (54)."""


class ThreadFilters:
    @conformance_test
    async def test_thread_filters_validate_their_arguments(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        assert isinstance(store, StoreInspector)
        for bad in (
            {"uncertain": 1},
            {"pending": "yes"},
            {"corrupt": 0},
            {"fingerprint_not_in": "fp-a"},
            {"fingerprint_not_in": [3]},
            {"fingerprint_not_in": {"fp-a": 1, "x": None} | {f"f{n}": n for n in range(100)}},
            {"fingerprint_not_in": 5},
        ):
            with pytest.raises(InvalidInputError):
                await store.list_threads(**bad)
        assert await store.list_threads(fingerprint_not_in=[f"f{n}" for n in range(100)]) == []

    @conformance_test
    async def test_thread_filters_report_the_pending_interaction(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        assert isinstance(store, StoreInspector)
        await _commit(store, "t1", _Thread(True, "fp-a", "question", False, False))
        await _commit(store, "t2", _Thread(True, "fp-a", None, False, False))
        rows = await store.list_threads()
        assert [r.pending_interaction for r in rows] == ["question", None]
        assert [r.thread_id for r in await store.list_threads(pending=True)] == ["t1"]

    def test_thread_filters_match_the_reference_model(self, harness: ConformanceHarness) -> None:
        loop = asyncio.new_event_loop()
        counter = itertools.count()
        corruptible = True

        async def opened() -> Any:
            return await harness.open()

        store = loop.run_until_complete(opened())

        async def example(threads: list[_Thread], limit: int) -> None:
            nonlocal corruptible
            prefix = f"x{next(counter):03d}-"
            model = {f"{prefix}{n:02d}": t for n, t in enumerate(threads)}
            for thread_id, t in model.items():
                if t.head:
                    await _commit(store, thread_id, t)
                if t.uncertain:
                    await _lose_a_charge(store, thread_id)
                if t.head and t.corrupt and corruptible:
                    try:
                        await harness.corrupt_turn(thread_id, "turn-1", _BROKEN_HEAD)
                    except pytest.skip.Exception:
                        corruptible = False
                if t.corrupt and not corruptible:
                    model[thread_id] = _Thread(t.head, t.fingerprint, t.kind, t.uncertain, False)
            for filters in _FILTERS:
                got: list[ThreadSummary] = []
                after: str | None = None
                while True:  # page through with the keyset cursor
                    page = await store.list_threads(
                        prefix=prefix, after=after, limit=limit, **filters
                    )
                    assert len(page) <= limit
                    got += page
                    if len(page) < limit:
                        break
                    after = page[-1].thread_id
                assert [r.thread_id for r in got] == _expected(model, filters, None), filters
                for row in got:
                    t = model[row.thread_id]
                    assert (row.uncertain_receipts > 0) == t.uncertain
                    assert row.pending_interaction == (t.kind if t.head else None)
                    assert (row.corrupt is not None) == (t.head and t.corrupt)
                    if t.head and not t.corrupt:
                        assert row.fingerprint == t.fingerprint

        @settings(
            max_examples=harness.stateful_examples // 2 + 5,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(threads=st.lists(_threads, min_size=0, max_size=8), limit=st.integers(1, 4))
        def check(threads: list[_Thread], limit: int) -> None:
            loop.run_until_complete(example(threads, limit))

        try:
            check()
        finally:
            loop.run_until_complete(harness.close_all())
            loop.close()
