"""The budget counter and provider slot conformance suite: what every store's ``FlowStorage``
must do (the rules of ``contracts.flow``).

A store runs the suite by subclassing ``FlowConformance`` and providing a ``flow_harness``
fixture that returns a ``FlowHarness`` (its ``_open`` returns a store with ``counters``)::

    class TestMyFlow(FlowConformance):
        @pytest.fixture
        def flow_harness(self, tmp_path):
            return MyFlowHarness(tmp_path)

Window rollover and slot expiry are checked with short windows and leases (``1s``, a fraction
of a second) on the store's own clock: the suite waits for the end the store reports.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from ...contracts.errors import ErrorCode, InvalidIdError, InvalidInputError
from ...contracts.flow import ANY_KEY, BudgetLine, SlotRequest
from ...contracts.ids import new_id
from ._flow_machine import FlowStore, run_flow_machine
from ._harness import StoreHarness, harness_test

__all__ = ["FlowConformance", "FlowHarness", "FlowStore"]


class FlowHarness(StoreHarness[FlowStore]):
    """Opens stores over one test's storage; a second ``open()`` is another process's view."""

    durable: bool = True
    """Counters outlive ``close()`` (the memory store's opens share process memory instead)."""

    machine_examples: int = 10
    """Examples of the concurrent reservation machine."""


flow_test = harness_test("flow_harness")


def line(tokens: int | None = 100, cost: float | None = None, per: str = "day") -> BudgetLine:
    return BudgetLine(new_id("b"), "tenant-a", per, tokens, cost)


def slot(provider: str, holder: str, **caps: Any) -> SlotRequest:
    caps.setdefault("concurrent", 2)
    caps.setdefault("per_minute", None)
    caps.setdefault("ttl", 30.0)
    return SlotRequest(provider, holder, caps["concurrent"], caps["per_minute"], caps["ttl"])


async def _until(moment: datetime) -> None:
    """Sleep past ``moment`` (the store's clock runs on this machine)."""
    await asyncio.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()) + 0.05)


class FlowConformance:
    """Every counter and slot test. Subclass it (with a ``Test`` prefix), define
    ``flow_harness``."""

    @flow_test
    async def test_a_line_grants_while_something_is_left_and_refuses_without_writing(
        self, h: FlowHarness
    ) -> None:
        counters = (await h.open()).counters
        budget = line(tokens=100)
        first = await counters.reserve(budget, 60, 0.0)
        second = await counters.reserve(budget, 60, 0.0)
        assert first.reservation is not None and second.reservation is not None
        assert second.usage.tokens_reserved == 120 and second.usage.calls == 2
        refused = await counters.reserve(budget, 1, 0.0)
        assert refused.reservation is None and refused.usage.exhausted
        (usage,) = await counters.usage(budget=budget.budget)
        assert (usage.tokens_reserved, usage.calls, usage.tokens_left) == (120, 2, 0)

    @flow_test
    async def test_settle_moves_the_reservation_to_real_usage_once(self, h: FlowHarness) -> None:
        counters = (await h.open()).counters
        budget = line(tokens=100, cost=1.0)
        reserved = (await counters.reserve(budget, 60, 0.5)).reservation
        assert reserved is not None
        assert await counters.settle(reserved.id, 25, 0.125)
        assert not await counters.settle(reserved.id, 25, 0.125)
        assert not await counters.settle(new_id("rsv"), 1, 0.0)
        (usage,) = await counters.usage(budget=budget.budget, key="tenant-a")
        assert (usage.tokens_used, usage.tokens_reserved, usage.cost_reserved) == (25, 0, 0.0)
        assert usage.cost_used == pytest.approx(0.125) and usage.tokens_left == 75

    @flow_test
    async def test_a_cost_limit_refuses_once_spent(self, h: FlowHarness) -> None:
        counters = (await h.open()).counters
        budget = line(tokens=None, cost=0.5)
        reserved = (await counters.reserve(budget, 10, 0.75)).reservation
        assert reserved is not None
        assert (await counters.reserve(budget, 1, 0.01)).reservation is None
        await counters.settle(reserved.id, 10, 0.25)
        assert (await counters.reserve(budget, 1, 0.01)).reservation is not None

    @flow_test
    async def test_an_operator_limit_wins_per_key_then_for_every_key(self, h: FlowHarness) -> None:
        counters = (await h.open()).counters
        budget = line(tokens=10)
        assert (await counters.reserve(budget, 10, 0.0)).reservation is not None
        assert (await counters.reserve(budget, 1, 0.0)).reservation is None
        await counters.set_limit(budget.budget, ANY_KEY, tokens=15, actor="ops", note="more")
        raised = await counters.reserve(budget, 1, 0.0)
        assert raised.reservation is not None and raised.usage.tokens_limit == 15
        assert raised.usage.overridden
        await counters.set_limit(budget.budget, "tenant-a", tokens=11, actor="ops", note="less")
        assert (await counters.reserve(budget, 1, 0.0)).reservation is None
        found = await counters.limits(budget=budget.budget)
        assert [(o.key, o.tokens, o.actor) for o in found] == [
            (ANY_KEY, 15, "ops"),
            ("tenant-a", 11, "ops"),
        ]

    @flow_test
    async def test_counters_and_limits_are_shared_and_survive_a_restart(
        self, h: FlowHarness
    ) -> None:
        first = await h.open()
        budget = line(tokens=50)
        reserved = (await first.counters.reserve(budget, 30, 0.0)).reservation
        assert reserved is not None
        await first.counters.set_limit(budget.budget, tokens=70, actor="ops", note="x")
        if h.durable:
            await first.close()
        again = await h.open()
        assert await again.counters.settle(reserved.id, 20, 0.0)
        (usage,) = await again.counters.usage(budget=budget.budget)
        assert (usage.tokens_used, usage.tokens_limit) == (20, 70)

    @flow_test
    async def test_the_window_rolls_over_on_the_store_clock(self, h: FlowHarness) -> None:
        counters = (await h.open()).counters
        budget = line(tokens=5, per="1s")
        first = await counters.reserve(budget, 5, 0.0)
        assert first.reservation is not None and first.usage.window_end is not None
        while (refused := await counters.reserve(budget, 1, 0.0)).reservation is None:
            if refused.usage.window_start != first.usage.window_start:
                break  # the refusal came from a later window: impossible, see below
            await _until(first.usage.window_end)
        assert refused.reservation is not None, "a new window starts empty"
        assert refused.usage.window_start >= first.usage.window_end
        assert (refused.usage.tokens_reserved, refused.usage.calls) == (1, 1)
        assert len(await counters.usage(budget=budget.budget)) == 2

    @flow_test
    async def test_bad_arguments_are_refused_and_nothing_is_written(self, h: FlowHarness) -> None:
        counters = (await h.open()).counters
        name = new_id("b")
        bad_lines = [
            BudgetLine(name, "k", "day", 0, None),
            BudgetLine(name, "k", "day", -5, None),
            BudgetLine(name, "k", "day", None, None),
            BudgetLine(name, "k", "week", 10, None),
            BudgetLine(name, "k", "day", None, float("nan")),
            BudgetLine(name, "", "day", 10, None),
        ]
        for bad in bad_lines:
            with pytest.raises(InvalidInputError):
                await counters.reserve(bad, 1, 0.0)
        good = BudgetLine(name, "k", "day", 10, None)
        for tokens, cost in ((-1, 0.0), (1, float("inf")), (True, 0.0)):
            with pytest.raises(InvalidInputError):
                await counters.reserve(good, tokens, cost)
        for limits in ({"tokens": 0}, {"tokens": -1}, {"cost": 0.0}, {}):
            with pytest.raises(InvalidInputError):
                await counters.set_limit(name, actor="ops", note="x", **limits)
        with pytest.raises(InvalidIdError) as caught:
            await counters.set_limit(name, tokens=5, actor="", note="x")
        assert caught.value.code is ErrorCode.INVALID_ID
        for request in (slot("p", "h", concurrent=0), slot("p", "h", ttl=0), slot("", "h")):
            with pytest.raises(InvalidInputError):
                await counters.acquire_slot(request)
        with pytest.raises(InvalidInputError):
            await counters.cool_down("p", -1)
        assert await counters.usage(budget=name) == []
        assert await counters.limits(budget=name) == []
        assert [p for p in await counters.providers() if p.provider == "p"] == []

    @flow_test
    async def test_slots_are_capped_and_granted_first_come_first_served(
        self, h: FlowHarness
    ) -> None:
        one, two = (await h.open()).counters, (await h.open()).counters
        provider = new_id("p")
        assert (await one.acquire_slot(slot(provider, "a"))).granted
        assert (await two.acquire_slot(slot(provider, "b"))).granted
        assert (await one.acquire_slot(slot(provider, "a"))).granted  # asking again renews
        waiting = [await two.acquire_slot(slot(provider, h)) for h in ("c", "d")]
        assert [(w.reason, w.position) for w in waiting] == [("busy", 0), ("busy", 1)]
        await one.release_slot(provider, "a")
        assert not (await two.acquire_slot(slot(provider, "d"))).granted  # c is ahead
        assert (await one.acquire_slot(slot(provider, "c"))).granted
        await two.release_slot(provider, "b")
        assert (await two.acquire_slot(slot(provider, "d"))).granted
        (status,) = [p for p in await one.providers() if p.provider == provider]
        assert (status.in_use, status.waiting, status.started_this_minute) == (2, 0, 4)

    @flow_test
    async def test_a_slot_lease_expires_and_a_silent_waiter_loses_its_place(
        self, h: FlowHarness
    ) -> None:
        counters = (await h.open()).counters
        provider = new_id("p")
        assert (await counters.acquire_slot(slot(provider, "dead", concurrent=1, ttl=0.3))).granted
        assert not (await counters.acquire_slot(slot(provider, "b", concurrent=1))).granted
        await asyncio.sleep(0.4)
        assert (await counters.acquire_slot(slot(provider, "b", concurrent=1))).granted

    @flow_test
    async def test_a_cool_down_stops_every_handle_until_its_end(self, h: FlowHarness) -> None:
        one, two = (await h.open()).counters, (await h.open()).counters
        provider = new_id("p")
        until = await one.cool_down(provider, 0.5)
        assert await two.cool_down(provider, 0.1) == until  # a shorter one does not shorten it
        answer = await two.acquire_slot(slot(provider, "x"))
        assert (answer.granted, answer.reason, answer.cooling_until) == (False, "cooling", until)
        assert 0 < answer.wait <= 0.5
        await _until(until)
        assert (await two.acquire_slot(slot(provider, "x"))).granted

    @flow_test
    async def test_per_minute_caps_the_starts_of_a_minute(self, h: FlowHarness) -> None:
        counters = (await h.open()).counters
        provider = new_id("p")
        caps = {"concurrent": None, "per_minute": 2}
        answers = [await counters.acquire_slot(slot(provider, x, **caps)) for x in "abc"]
        if answers[2].granted:  # the minute turned between the asks: ask in the new one
            answers = [await counters.acquire_slot(slot(provider, x, **caps)) for x in "def"]
        assert [a.reason for a in answers] == ["granted", "granted", "rate"]
        assert 0 < answers[2].wait <= 60

    def test_concurrent_reservations_match_a_serial_model(self, flow_harness: FlowHarness) -> None:
        try:
            run_flow_machine(flow_harness, examples=flow_harness.machine_examples)
        finally:
            asyncio.run(flow_harness.close_all())
