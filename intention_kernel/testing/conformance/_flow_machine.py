"""Concurrent reservations against a serial model (hypothesis): the counter role is atomic.

Each step sends a batch of reservations of one amount at once, spread over several store
handles (several connections: for SQL stores, as separate processes would), or settles
outstanding reservations at once, or an operator changes the limit. Reservations of one amount
are granted, in any serial order, until nothing is left: so the number a batch gets is known
without knowing the order, and a store that reads and then writes without holding the line
grants more. After each step the counter must equal the model: ``reserved`` the sum of the
open reservations, ``used`` the sum of the settled amounts, ``calls`` the grants.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from ...contracts.flow import BudgetLine, FlowCounters, Reservation
from ...contracts.ids import new_id

__all__ = ["FlowStore", "run_flow_machine"]


class FlowStore(Protocol):
    """A store with budget counters and provider slots (``store.counters``)."""

    @property
    def counters(self) -> FlowCounters: ...

    async def close(self) -> None: ...


class _Opener(Protocol):
    async def open(self) -> FlowStore: ...


def _machine(harness: _Opener, handles: int) -> type[RuleBasedStateMachine]:
    class ReservationMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.stores = [self.run(harness.open()) for _ in range(handles)]
            self.line = BudgetLine(new_id("b"), "tenant-a", "all", 100, None)
            self.limit = 100
            self.open: list[Reservation] = []
            self.used = 0
            self.calls = 0

        def run(self, coro: Any) -> Any:
            return self.loop.run_until_complete(coro)

        def _reserved(self) -> int:
            return sum(r.tokens for r in self.open)

        @rule(count=st.integers(1, 8), amount=st.integers(1, 40))
        def reserve_at_once(self, count: int, amount: int) -> None:
            left = self.limit - self.used - self._reserved()
            expected = 0 if left <= 0 else min(count, -(-left // amount))

            async def batch() -> list[Any]:
                return await asyncio.gather(
                    *(
                        self.stores[i % len(self.stores)].counters.reserve(self.line, amount, 0.0)
                        for i in range(count)
                    )
                )

            granted = [r.reservation for r in self.run(batch()) if r.reservation is not None]
            assert len(granted) == expected, (len(granted), expected, left, amount)
            self.open.extend(g for g in granted if g is not None)
            self.calls += len(granted)

        @rule(data=st.data())
        def settle_at_once(self, data: st.DataObject) -> None:
            if not self.open:
                return
            chosen = data.draw(st.lists(st.sampled_from(self.open), unique_by=id, min_size=1))
            real = [data.draw(st.integers(0, r.tokens + 5)) for r in chosen]

            async def batch() -> list[bool]:
                calls = [
                    self.stores[i % len(self.stores)].counters.settle(r.id, used, 0.0)
                    for i, (r, used) in enumerate(zip(chosen, real, strict=True))
                ]
                # The same settle again, at once: whichever is first, it counts once.
                again = self.stores[-1].counters.settle(chosen[0].id, real[0], 0.0)
                return await asyncio.gather(*calls, again)

            answers = self.run(batch())
            assert sum(answers) == len(chosen)  # the repeated settle counted once
            for reservation, used in zip(chosen, real, strict=True):
                self.open.remove(reservation)
                self.used += used

        @rule(limit=st.integers(1, 300))
        def operator_sets_the_limit(self, limit: int) -> None:
            counters = self.stores[0].counters
            self.run(
                counters.set_limit(
                    self.line.budget, self.line.key, tokens=limit, actor="ops", note="test"
                )
            )
            self.limit = limit

        @invariant()
        def the_counter_is_the_model(self) -> None:
            found = self.run(self.stores[0].counters.usage(budget=self.line.budget))
            if not found:
                assert self.calls == 0
                return
            (usage,) = found
            assert usage.tokens_reserved == self._reserved()
            assert usage.tokens_used == self.used
            assert usage.calls == self.calls
            assert usage.tokens_limit == self.limit

        def teardown(self) -> None:
            for store in self.stores:
                self.run(store.close())
            self.loop.close()

    return ReservationMachine


def run_flow_machine(harness: _Opener, *, examples: int, handles: int = 3) -> None:
    """Run the machine over stores the harness opens (deterministic: derandomized)."""
    run_state_machine_as_test(
        _machine(harness, handles),
        settings=settings(
            max_examples=examples,
            stateful_step_count=12,
            deadline=None,
            database=None,
            derandomize=True,
        ),
    )
