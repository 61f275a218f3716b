"""``Counters``: the public face of a store's budget counters and provider slots
(``store.counters``, a ``contracts.flow.FlowCounters``).

Each method checks its arguments, then that the store is open, then makes one call to the
store's ``FlowStorage`` role. A bad argument is refused the same way on every store, before
anything is written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..contracts.errors import InvalidInputError
from ..contracts.flow import (
    ANY_KEY,
    BudgetLine,
    BudgetUsage,
    LimitOverride,
    ProviderStatus,
    Reserved,
    SlotAnswer,
    SlotRequest,
)
from ..contracts.ids import new_id, validate_id
from . import _arguments as check
from ._flow_role import FlowStorage
from ._writes import utc_now

__all__ = ["MAX_COOL_DOWN", "Counters", "check_per"]

MAX_AMOUNT = 10**15
"""Largest token amount or cost one call may reserve or settle (far above any real one)."""
MAX_COOL_DOWN = 86_400.0
"""Longest cool-down a provider can ask for (seconds); longer ones are cut to it."""
_PER = re.compile(r"^(all|hour|day|month|[1-9][0-9]{0,8}s)$")
_ID_LENGTH = 256


def check_per(per: Any) -> str:
    if not isinstance(per, str) or not _PER.match(per):
        raise InvalidInputError(
            "per must be 'hour', 'day', 'month', 'all' or '<n>s'", context={"field": "per"}
        )
    return per


def _amount(value: Any, name: str, *, whole: bool) -> Any:
    kinds = (int,) if whole else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or not math.isfinite(value)
        or not 0 <= value <= MAX_AMOUNT
    ):
        kind = "a whole number" if whole else "a finite number"
        raise InvalidInputError(
            f"{name} must be {kind} from 0 to {MAX_AMOUNT}", context={"field": name}
        )
    return value


def _limit(value: Any, name: str, *, whole: bool) -> Any:
    """A limit: ``None`` or a positive amount (zero and negative limits are refused)."""
    if value is None:
        return None
    _amount(value, name, whole=whole)
    if not value > 0:
        raise InvalidInputError(f"{name} must be more than 0", context={"field": name})
    return int(value) if whole else float(value)


def _optional_count(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise InvalidInputError(f"{name} must be an integer from 1", context={"field": name})
    return value


def check_line(line: Any) -> BudgetLine:
    if not isinstance(line, BudgetLine):
        raise InvalidInputError("line must be a BudgetLine", context={"field": "line"})
    validate_id(line.budget, "budget", max_length=_ID_LENGTH)
    validate_id(line.key, "key", max_length=_ID_LENGTH)
    check_per(line.per)
    tokens = _limit(line.tokens, "tokens", whole=True)
    cost = _limit(line.cost, "cost", whole=False)
    if tokens is None and cost is None:
        raise InvalidInputError("a budget needs a token or a cost limit", context={"field": "line"})
    return BudgetLine(line.budget, line.key, line.per, tokens, cost)


class Counters:
    """``store.counters``: budget reservations, operators' limits and provider slots."""

    def __init__(
        self,
        role: FlowStorage,
        *,
        check_open: Callable[[], None],
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._role = role
        self._check_open = check_open
        self._clock = clock

    async def reserve(self, line: BudgetLine, tokens: int, cost: float) -> Reserved:
        """Reserve a call's worst case against the line (``contracts.flow``)."""
        line = check_line(line)
        tokens = _amount(tokens, "tokens", whole=True)
        cost = float(_amount(cost, "cost", whole=False))
        self._check_open()
        return await self._role.reserve(line, tokens, cost, new_id("rsv"))

    async def settle(self, reservation_id: str, tokens: int, cost: float) -> bool:
        """Settle a reservation to the call's real usage (once; ``False`` if already done)."""
        validate_id(reservation_id, "reservation_id")
        tokens = _amount(tokens, "tokens", whole=True)
        cost = float(_amount(cost, "cost", whole=False))
        self._check_open()
        return await self._role.settle(reservation_id, tokens, cost)

    async def usage(
        self, *, budget: str | None = None, key: str | None = None, limit: int = 100
    ) -> list[BudgetUsage]:
        """Budget lines per window, newest window first, with what is left."""
        if budget is not None:
            validate_id(budget, "budget", max_length=_ID_LENGTH)
        if key is not None:
            validate_id(key, "key", max_length=_ID_LENGTH)
        limit = check.check_limit(limit)
        self._check_open()
        return await self._role.usage(budget, key, limit)

    async def set_limit(
        self,
        budget: str,
        key: str = ANY_KEY,
        *,
        tokens: int | None = None,
        cost: float | None = None,
        actor: str,
        note: str,
    ) -> LimitOverride:
        """Replace a budget's limits in the store, for one key or all (``"*"``): every process
        uses them from its next reservation, without a deploy."""
        validate_id(budget, "budget", max_length=_ID_LENGTH)
        validate_id(key, "key", max_length=_ID_LENGTH)
        validate_id(actor, "actor")
        tokens = _limit(tokens, "tokens", whole=True)
        cost = _limit(cost, "cost", whole=False)
        if tokens is None and cost is None:
            raise InvalidInputError("give a token or a cost limit", context={"field": "tokens"})
        if not isinstance(note, str) or not note.strip():
            raise InvalidInputError("note must be non-blank text", context={"field": "note"})
        self._check_open()
        override = LimitOverride(budget, key, tokens, cost, actor, note[:2000], self._clock())
        return await self._role.set_limit(override)

    async def limits(self, *, budget: str | None = None) -> list[LimitOverride]:
        """The operators' limits in the store."""
        if budget is not None:
            validate_id(budget, "budget", max_length=_ID_LENGTH)
        self._check_open()
        return await self._role.limits(budget)

    async def acquire_slot(self, request: SlotRequest) -> SlotAnswer:
        """Ask for (or renew) a provider slot; never waits (the kernel waits between asks)."""
        if not isinstance(request, SlotRequest):
            raise InvalidInputError("request must be a SlotRequest", context={"field": "request"})
        validate_id(request.provider, "provider")
        validate_id(request.holder, "holder")
        concurrent = _optional_count(request.concurrent, "concurrent")
        per_minute = _optional_count(request.per_minute, "per_minute")
        ttl = check.check_seconds(request.ttl, "ttl")
        if not 0 < ttl <= 3600:
            raise InvalidInputError("ttl must be in (0, 3600] seconds", context={"field": "ttl"})
        self._check_open()
        chosen = SlotRequest(request.provider, request.holder, concurrent, per_minute, ttl)
        return await self._role.acquire_slot(chosen)

    async def release_slot(self, provider: str, holder: str) -> None:
        validate_id(provider, "provider")
        validate_id(holder, "holder")
        self._check_open()
        await self._role.release_slot(provider, holder)

    async def cool_down(self, provider: str, seconds: float) -> datetime:
        """Stop every process's calls to ``provider`` for ``seconds`` (at most a day)."""
        validate_id(provider, "provider")
        seconds = check.check_seconds(seconds, "seconds")
        if not seconds > 0:
            raise InvalidInputError("seconds must be more than 0", context={"field": "seconds"})
        self._check_open()
        return await self._role.cool_down(provider, min(seconds, MAX_COOL_DOWN))

    async def providers(self) -> list[ProviderStatus]:
        self._check_open()
        return await self._role.providers()
