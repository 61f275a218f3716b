"""Budgets, provider limits and prices: what a host declares to bound model spend.

``Budget`` caps the tokens and/or the cost of model calls per window (``per``: ``"hour"``,
``"day"``, ``"month"``, a ``timedelta``, or ``None`` for no window) and per scope: one counter
per ``"agent"``, per ``"thread"``, or per ``"tenant"`` (the ``key`` callable names the tenant of
a turn). ``Limit`` caps one provider's calls in flight (``concurrent``) and started per minute
(``per_minute``), for every process on the store. ``Price`` is a model's price per million
input and output tokens, in the host's currency (a cost budget needs the price of every model
the agent calls). See ``docs/budgets.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from ..contracts.errors import ConfigurationError
from ..contracts.ids import validate_id

__all__ = ["Budget", "BudgetContext", "Limit", "Price", "check_limits", "check_prices"]

Scope = Literal["tenant", "agent", "thread"]
_CALENDAR = ("hour", "day", "month")


@dataclass(frozen=True, slots=True)
class BudgetContext:
    """What a budget's ``key`` callable is given: the turn being run."""

    agent_id: str
    thread_id: str
    turn_id: str
    host_context: Mapping[str, Any]


def _positive(value: object, name: str, *, whole: bool) -> None:
    kinds = (int,) if whole else (int, float)
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or not math.isfinite(value)
        or not value > 0
    ):
        kind = "a whole number" if whole else "a number"
        raise ConfigurationError(f"{name} must be {kind} above 0", context={"setting": name})


@dataclass(frozen=True, slots=True)
class Budget:
    """A spend limit held by the store across every process (see the module docstring).

    ``name`` identifies the budget in the store and to operators (default
    ``"<scope>.<per>"``). ``reserve_output`` is the output a call is assumed to use at worst
    when its gateway names no ``max_tokens``.
    """

    tokens: int | None = None
    cost: float | None = None
    per: str | timedelta | None = "day"
    scope: Scope = "agent"
    key: Callable[[BudgetContext], str] | None = None
    name: str | None = None
    reserve_output: int = 4096
    window: str = field(init=False, default="")
    """``per`` as the store names windows (``hour``, ``day``, ``month``, ``all``, ``<n>s``)."""

    def __post_init__(self) -> None:
        _positive(self.tokens, "tokens", whole=True)
        _positive(self.cost, "cost", whole=False)
        _positive(self.reserve_output, "reserve_output", whole=True)
        if self.tokens is None and self.cost is None:
            raise ConfigurationError(
                "a budget needs tokens or cost (or both)", context={"setting": "budget"}
            )
        if self.per is None:
            window = "all"
        elif isinstance(self.per, timedelta):
            seconds = self.per.total_seconds()
            if seconds < 1 or seconds != int(seconds):
                raise ConfigurationError(
                    "a budget's per must be a whole number of seconds, at least 1",
                    context={"setting": "per"},
                )
            window = f"{int(seconds)}s"
        elif self.per in _CALENDAR:
            window = str(self.per)
        else:
            raise ConfigurationError(
                "per must be 'hour', 'day', 'month', a timedelta or None",
                context={"setting": "per"},
            )
        if self.scope not in ("tenant", "agent", "thread"):
            raise ConfigurationError(
                "scope must be 'tenant', 'agent' or 'thread'", context={"setting": "scope"}
            )
        if self.key is not None and not callable(self.key):
            raise ConfigurationError("key must be callable", context={"setting": "key"})
        if self.scope == "tenant" and self.key is None:
            raise ConfigurationError(
                "a tenant budget needs key=callable naming the tenant of a turn",
                context={"setting": "key"},
            )
        object.__setattr__(self, "window", window)
        if self.name is None:
            object.__setattr__(self, "name", f"{self.scope}.{window}")
        validate_id(self.name, "budget name", max_length=256)

    @property
    def label(self) -> str:
        """The budget's name in the store (always set after construction)."""
        assert self.name is not None
        return self.name


@dataclass(frozen=True, slots=True)
class Limit:
    """One provider's flow control, shared by every process on the store: at most
    ``concurrent`` calls in flight, at most ``per_minute`` started per minute (``None``: no cap
    of that kind; a ``Limit()`` without caps still shares the provider's cool-downs).
    ``lease`` is how long a held slot lasts without renewal (renewed while the call runs, so a
    crashed process's slot comes back after at most this)."""

    concurrent: int | None = None
    per_minute: int | None = None
    lease: float = 30.0

    def __post_init__(self) -> None:
        _positive(self.concurrent, "concurrent", whole=True)
        _positive(self.per_minute, "per_minute", whole=True)
        _positive(self.lease, "lease", whole=False)
        if self.lease > 3600 or self.lease < 0.5:
            raise ConfigurationError(
                "lease must be from 0.5 to 3600 seconds", context={"setting": "lease"}
            )


@dataclass(frozen=True, slots=True)
class Price:
    """A model's price per million ``input`` and ``output`` tokens (the host's currency)."""

    input: float
    output: float

    def __post_init__(self) -> None:
        for name in ("input", "output"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigurationError(
                    f"a price's {name} must be a number >= 0", context={"setting": name}
                )

    def of(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


def check_limits(limits: object) -> dict[str, Limit]:
    if not isinstance(limits, Mapping):
        raise ConfigurationError(
            "provider_limits must map provider names to Limit",
            context={"setting": "provider_limits"},
        )
    checked: dict[str, Limit] = {}
    for provider, limit in limits.items():
        validate_id(provider, "provider")
        if not isinstance(limit, Limit):
            raise ConfigurationError(
                "every provider limit must be a Limit", context={"setting": "provider_limits"}
            )
        checked[provider] = limit
    return checked


def check_prices(prices: object) -> dict[str, Price]:
    if not isinstance(prices, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Price) for k, v in prices.items()
    ):
        raise ConfigurationError(
            "prices must map model names to Price", context={"setting": "prices"}
        )
    return dict(prices)
