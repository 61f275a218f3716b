"""Budgets and provider flow control as a store keeps them: counters, reservations, slots.

Why in the store: a spend limit or a provider's concurrency cap that each process keeps for
itself is multiplied by the number of processes. Every process on one store shares these
counters, and they survive restarts.

**Budget counters.** A budget line is ``(budget, key)`` (a budget's name and the scope key of
one tenant, agent or thread); its counter is per window (``per``: ``hour``, ``day``,
``month``, ``all``, or ``<n>s`` for a window of ``n`` seconds), the window found on the
store's clock. Before a model call the kernel *reserves* the call's worst case; after it, it
*settles* the reservation to what the call really used. The reservation rule: a reservation
is granted while the line has something left (``used + reserved < limit`` for every limit the
line has) and then adds its whole amount to ``reserved``. So calls running at once can pass a
limit by at most the one reservation granted last (when no call uses more than it reserved),
and an exhausted line makes no call. A reservation that is never settled (its process died)
stays counted in full: a budget errs on the side of spending less.

**Limits** are declared in code and can be replaced in the store by an operator (per key, or
``"*"`` for every key of a budget): the store's value wins, without a deploy.

**Provider slots.** ``acquire_slot`` grants one of ``concurrent`` slots of a provider to a
holder, first come first served among the holders waiting for it (a waiter keeps its place
while it keeps asking), unless the provider is cooling down (a 429 or 529 answer's
``Retry-After``, recorded by ``cool_down`` for every process) or ``per_minute`` calls already
started in this minute of the store's clock. A slot is a lease: it expires ``ttl`` seconds
after it was granted or last renewed (asking again renews it), so a crashed holder's slot
comes back.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

__all__ = [
    "ANY_KEY",
    "BudgetLine",
    "BudgetUsage",
    "FlowCounters",
    "LimitOverride",
    "ProviderStatus",
    "Reservation",
    "Reserved",
    "SlotAnswer",
    "SlotRequest",
    "backoff_reporter",
    "report_backoff",
    "window_bounds",
]

ANY_KEY = "*"
"""The key of an operator's limit that applies to every key of a budget."""

_SECONDS = re.compile(r"^([1-9][0-9]{0,8})s$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def window_bounds(per: str, now: datetime) -> tuple[datetime, datetime | None]:
    """The window of ``per`` that contains ``now``: its start and end (``None``: never ends).

    Calendar windows are UTC; ``<n>s`` windows are aligned on the Unix epoch. Raises
    ``ValueError`` for an unknown ``per`` (callers check it first).
    """
    now = now.astimezone(UTC)
    if per == "all":
        return _EPOCH, None
    if per == "hour":
        start = now.replace(minute=0, second=0, microsecond=0)
        return start, start + timedelta(hours=1)
    if per == "day":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + timedelta(days=1)
    if per == "month":
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        following = (start + timedelta(days=32)).replace(day=1)
        return start, following
    found = _SECONDS.match(per)
    if found is None:
        raise ValueError(f"unknown budget window: {per!r}")
    size = int(found[1])
    elapsed = int((now - _EPOCH).total_seconds())
    start = _EPOCH + timedelta(seconds=elapsed - elapsed % size)
    return start, start + timedelta(seconds=size)


@dataclass(frozen=True, slots=True)
class BudgetLine:
    """What one reservation is checked against: the line ``(budget, key)``, its window kind
    and the limits declared in code (``None``: no limit of that kind)."""

    budget: str
    key: str
    per: str
    tokens: int | None
    cost: float | None


@dataclass(frozen=True, slots=True)
class Reservation:
    """A granted reservation: settle it with ``settle(id, ...)`` once the call is over."""

    id: str
    budget: str
    key: str
    window_start: datetime
    tokens: int
    cost: float


@dataclass(frozen=True, slots=True)
class BudgetUsage:
    """One budget line in one window, with the limits in force (the operator's or the code's).

    ``tokens_limit`` / ``cost_limit`` are ``None`` when the line has no limit of that kind.
    """

    budget: str
    key: str
    per: str
    window_start: datetime
    window_end: datetime | None
    tokens_used: int
    tokens_reserved: int
    cost_used: float
    cost_reserved: float
    calls: int
    tokens_limit: int | None
    cost_limit: float | None
    overridden: bool = False
    """A limit in force comes from an operator (``set_limit``), not from code."""

    @property
    def tokens_left(self) -> int | None:
        if self.tokens_limit is None:
            return None
        return max(0, self.tokens_limit - self.tokens_used - self.tokens_reserved)

    @property
    def cost_left(self) -> float | None:
        if self.cost_limit is None:
            return None
        return max(0.0, self.cost_limit - self.cost_used - self.cost_reserved)

    @property
    def exhausted(self) -> bool:
        """Nothing left of some limit: no reservation is granted."""
        return self.tokens_left == 0 or self.cost_left == 0


@dataclass(frozen=True, slots=True)
class Reserved:
    """What ``reserve`` answered: the ``reservation`` (``None``: refused, nothing written) and
    the line's usage after the call."""

    reservation: Reservation | None
    usage: BudgetUsage


@dataclass(frozen=True, slots=True)
class LimitOverride:
    """An operator's limits for a budget's key (``ANY_KEY``: all keys); ``None`` keeps the
    code's limit of that kind."""

    budget: str
    key: str
    tokens: int | None
    cost: float | None
    actor: str
    note: str
    set_at: datetime


@dataclass(frozen=True, slots=True)
class SlotRequest:
    """Ask for a slot of ``provider`` for ``holder`` (``None`` caps: no cap of that kind)."""

    provider: str
    holder: str
    concurrent: int | None
    per_minute: int | None
    ttl: float


@dataclass(frozen=True, slots=True)
class SlotAnswer:
    """``granted``, or why not: ``cooling`` (until ``cooling_until``), ``busy`` (every slot
    held, or holders ahead in the queue: ``position`` counts them) or ``rate`` (this minute's
    calls all started); ``wait`` is the seconds worth waiting before asking again."""

    granted: bool
    reason: str
    wait: float = 0.0
    position: int = 0
    cooling_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class ProviderStatus:
    """A provider's slots as the store sees them now."""

    provider: str
    in_use: int
    waiting: int
    started_this_minute: int
    cooling_until: datetime | None


@runtime_checkable
class FlowCounters(Protocol):
    """A store's budget counters and provider slots (``store.counters``); the kernel uses only
    this."""

    async def reserve(self, line: BudgetLine, tokens: int, cost: float) -> Reserved: ...

    async def settle(self, reservation_id: str, tokens: int, cost: float) -> bool: ...

    async def usage(
        self, *, budget: str | None = None, key: str | None = None, limit: int = 100
    ) -> list[BudgetUsage]: ...

    async def set_limit(
        self,
        budget: str,
        key: str = ANY_KEY,
        *,
        tokens: int | None = None,
        cost: float | None = None,
        actor: str,
        note: str,
    ) -> LimitOverride: ...

    async def limits(self, *, budget: str | None = None) -> list[LimitOverride]: ...

    async def acquire_slot(self, request: SlotRequest) -> SlotAnswer: ...

    async def release_slot(self, provider: str, holder: str) -> None: ...

    async def cool_down(self, provider: str, seconds: float) -> datetime: ...

    async def providers(self) -> list[ProviderStatus]: ...


BackoffReporter = Callable[[str, float, str], Awaitable[float]]
"""``(provider, seconds, kind) -> seconds to wait``: called by a gateway that was told to back
off (a 429 or 529 with ``Retry-After``); answers how long the provider now cools down."""

_REPORTER: ContextVar[BackoffReporter | None] = ContextVar("ik_backoff_reporter", default=None)


def backoff_reporter() -> ContextVar[BackoffReporter | None]:
    """The context variable the kernel sets around a model call (gateways only read it)."""
    return _REPORTER


async def report_backoff(provider: str | None, seconds: float | None, kind: str) -> float | None:
    """Tell the kernel's flow control that ``provider`` asked to wait ``seconds``; returns
    the cool-down to honour (at least ``seconds``), or ``None`` outside a kernel's call."""
    reporter = _REPORTER.get()
    if reporter is None or provider is None or seconds is None or not seconds > 0:
        return None
    return await reporter(provider, float(seconds), kind)
