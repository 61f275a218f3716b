"""``MemoryFlow``: the ``FlowStorage`` role of the test-only memory store.

The reference for the role: it applies ``_flow_rules`` as they are, with no ``await`` inside a
change, so each change is atomic in the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ...contracts.flow import (
    BudgetLine,
    BudgetUsage,
    LimitOverride,
    ProviderStatus,
    Reservation,
    Reserved,
    SlotAnswer,
    SlotRequest,
    window_bounds,
)
from .._flow_rules import WAITER_GRACE, Counter, admits, limits_in_force, minute_of, slot_answer
from .._writes import utc_now

__all__ = ["FlowState", "MemoryFlow"]

LineKey = tuple[str, str, datetime]


@dataclass
class FlowState:
    """Counters, reservations, limits and slots of one memory store."""

    counters: dict[LineKey, Counter] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    overrides: dict[tuple[str, str], LimitOverride] = field(default_factory=dict)
    slots: dict[str, dict[str, datetime]] = field(default_factory=dict)
    """Per provider: holder -> expiry."""
    waiters: dict[str, dict[str, tuple[int, datetime]]] = field(default_factory=dict)
    """Per provider: holder -> (ticket, expiry)."""
    tickets: int = 0
    starts: dict[str, tuple[datetime, int]] = field(default_factory=dict)
    """Per provider: the minute and how many calls started in it."""
    cooling: dict[str, datetime] = field(default_factory=dict)


class MemoryFlow:
    """``FlowStorage`` over a ``FlowState``."""

    def __init__(self, state: FlowState, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.state = state
        self.clock = clock

    # ---------------------------------------------------------------- budgets

    def _overrides(self, budget: str) -> dict[str, tuple[int | None, float | None]]:
        return {
            key: (o.tokens, o.cost) for (b, key), o in self.state.overrides.items() if b == budget
        }

    def _usage(self, line: BudgetLine, start: datetime, counter: Counter) -> BudgetUsage:
        tokens, cost, overridden = limits_in_force(line, self._overrides(line.budget))
        return BudgetUsage(
            line.budget,
            line.key,
            counter.per,
            start,
            window_bounds(counter.per, start)[1],
            counter.tokens_used,
            counter.tokens_reserved,
            counter.cost_used,
            counter.cost_reserved,
            counter.calls,
            tokens,
            cost,
            overridden,
        )

    async def reserve(
        self, line: BudgetLine, tokens: int, cost: float, reservation_id: str
    ) -> Reserved:
        start, _ = window_bounds(line.per, self.clock())
        key = (line.budget, line.key, start)
        counter = self.state.counters.get(key) or Counter(line.per, tokens_limit=line.tokens)
        tokens_limit, cost_limit, _ = limits_in_force(line, self._overrides(line.budget))
        if not admits(counter, tokens_limit, cost_limit):
            return Reserved(None, self._usage(line, start, counter))
        self.state.counters[key] = counter
        counter.tokens_limit, counter.cost_limit = line.tokens, line.cost
        counter.tokens_reserved += tokens
        counter.cost_reserved += cost
        counter.calls += 1
        reservation = Reservation(reservation_id, line.budget, line.key, start, tokens, cost)
        self.state.reservations[reservation_id] = reservation
        return Reserved(reservation, self._usage(line, start, counter))

    async def settle(self, reservation_id: str, tokens: int, cost: float) -> bool:
        reservation = self.state.reservations.pop(reservation_id, None)
        if reservation is None:
            return False
        found = reservation.budget, reservation.key, reservation.window_start
        counter = self.state.counters[found]
        counter.tokens_reserved -= reservation.tokens
        counter.cost_reserved = max(0.0, counter.cost_reserved - reservation.cost)
        counter.tokens_used += tokens
        counter.cost_used += cost
        return True

    async def usage(self, budget: str | None, key: str | None, limit: int) -> list[BudgetUsage]:
        chosen = sorted(
            (
                (k, c)
                for k, c in self.state.counters.items()
                if (budget is None or k[0] == budget) and (key is None or k[1] == key)
            ),
            key=lambda item: (-item[0][2].timestamp(), item[0][0], item[0][1]),
        )
        return [
            self._usage(BudgetLine(b, k, c.per, c.tokens_limit, c.cost_limit), start, c)
            for (b, k, start), c in chosen[:limit]
        ]

    async def set_limit(self, override: LimitOverride) -> LimitOverride:
        stored = LimitOverride(
            override.budget,
            override.key,
            override.tokens,
            override.cost,
            override.actor,
            override.note,
            self.clock(),
        )
        self.state.overrides[(override.budget, override.key)] = stored
        return stored

    async def limits(self, budget: str | None) -> list[LimitOverride]:
        return [
            o for (b, _), o in sorted(self.state.overrides.items()) if budget is None or b == budget
        ]

    # ---------------------------------------------------------------- providers

    def _expire(
        self, provider: str, now: datetime
    ) -> tuple[dict[str, datetime], dict[str, tuple[int, datetime]]]:
        slots = self.state.slots.setdefault(provider, {})
        waiters = self.state.waiters.setdefault(provider, {})
        for holder in [h for h, until in slots.items() if until <= now]:
            del slots[holder]
        for holder in [h for h, (_, until) in waiters.items() if until <= now]:
            del waiters[holder]
        return slots, waiters

    def _started(self, provider: str, now: datetime) -> int:
        minute, count = self.state.starts.get(provider, (minute_of(now), 0))
        return count if minute == minute_of(now) else 0

    async def acquire_slot(self, request: SlotRequest) -> SlotAnswer:
        now = self.clock()
        provider, holder = request.provider, request.holder
        slots, waiters = self._expire(provider, now)
        mine = waiters.get(holder)
        ticket = mine[0] if mine is not None else None
        ahead = sum(1 for t, _ in waiters.values() if ticket is None or t < ticket)
        started = self._started(provider, now)
        answer = slot_answer(
            request,
            now,
            holds=holder in slots,
            in_use=sum(1 for h in slots if h != holder),
            ahead=ahead,
            started=started,
            cooling_until=self.state.cooling.get(provider),
        )
        if answer.granted:
            if holder not in slots:
                self.state.starts[provider] = (minute_of(now), started + 1)
            slots[holder] = now + timedelta(seconds=request.ttl)
            waiters.pop(holder, None)
            return answer
        if ticket is None:
            self.state.tickets += 1
            ticket = self.state.tickets
        waiters[holder] = (ticket, now + timedelta(seconds=answer.wait + WAITER_GRACE))
        return answer

    async def release_slot(self, provider: str, holder: str) -> None:
        self.state.slots.get(provider, {}).pop(holder, None)
        self.state.waiters.get(provider, {}).pop(holder, None)

    async def cool_down(self, provider: str, seconds: float) -> datetime:
        until = self.clock() + timedelta(seconds=seconds)
        current = self.state.cooling.get(provider)
        if current is None or current < until:
            self.state.cooling[provider] = until
        return self.state.cooling[provider]

    async def providers(self) -> list[ProviderStatus]:
        now = self.clock()
        names = set(self.state.slots) | set(self.state.waiters) | set(self.state.cooling)
        found = []
        for provider in sorted(names):
            slots, waiters = self._expire(provider, now)
            cooling = self.state.cooling.get(provider)
            cooling = cooling if cooling is not None and cooling > now else None
            started = self._started(provider, now)
            if slots or waiters or cooling or started:
                found.append(ProviderStatus(provider, len(slots), len(waiters), started, cooling))
        return found
