"""Budgets and provider flow control around each model call (``FlowGate``).

Why around ``ask``: every model request of a turn goes through it, so one place reserves the
call's worst case against each budget before the call and settles it to the real usage after,
and holds one of the provider's slots while the call runs. All of it lives in the store
(``contracts.flow``), shared by every process on it.

The worst case of a call: its prompt's bytes (a token is at least one byte), an allowance for
what a gateway adds (its task guide, message framing), and the gateway's ``max_tokens`` (else
the budget's ``reserve_output``), priced by the host's ``Price`` table. A call whose
reservation is refused is not made: ``FlowControlError`` (``BUDGET_EXCEEDED``) ends the turn
before anything of it is written. A call that failed with the provider's answer (an HTTP error)
used nothing; one cut short otherwise (a timeout, a cancellation) is charged in full.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..contracts.errors import (
    ConfigurationError,
    ErrorCode,
    FlowControlError,
    InvalidInputError,
    KernelError,
)
from ..contracts.flow import (
    BudgetLine,
    FlowCounters,
    Reservation,
    SlotRequest,
    backoff_reporter,
)
from ..contracts.ids import new_id, validate_id
from ..telemetry import FlowMetrics, key_hash
from ._budgets import Budget, BudgetContext, Limit, Price
from ._routing import ModelRoute, provider_of
from .streaming import ProviderWait

__all__ = ["GUIDE_ALLOWANCE", "FlowGate", "Ticket", "build_gate", "flow_counters"]

GUIDE_ALLOWANCE = 2048
"""Tokens reserved beyond the prompt's bytes for what a gateway adds to it."""
_COOLING_KINDS = ("rate_limit", "overloaded")


def flow_counters(durability: object) -> FlowCounters | None:
    """The store's counters, or ``None`` for a store without them."""
    try:
        counters = getattr(durability, "counters", None)
    except KernelError:  # a ``DurableStore`` built without the role says NOT_SUPPORTED
        return None
    return counters if isinstance(counters, FlowCounters) else None


@dataclass(slots=True)
class Ticket:
    """One admitted model call: its reservations, and the usage the call reported."""

    reservations: list[tuple[Budget, Reservation]] = field(default_factory=list)
    price: Price | None = None
    input_tokens: int | None = None
    output_tokens: int = 0

    def used(self, input_tokens: int, output_tokens: int) -> None:
        self.input_tokens, self.output_tokens = input_tokens, output_tokens


class FlowGate:
    """The budgets and provider limits of one compiled agent, over the store's counters."""

    def __init__(
        self,
        counters: FlowCounters | None,
        *,
        agent_id: str,
        budgets: tuple[Budget, ...],
        limits: Mapping[str, Limit],
        prices: Mapping[str, Price],
        metrics: FlowMetrics,
    ) -> None:
        self.counters = counters
        self.agent_id = agent_id
        self.budgets = budgets
        self.limits = dict(limits)
        self.prices = dict(prices)
        self.metrics = metrics

    def price_of(self, route: ModelRoute) -> Price | None:
        return self.prices.get(route.label) or self.prices.get(route.model or "")

    @contextlib.asynccontextmanager
    async def call(self, state: Any, route: ModelRoute, prompt_bytes: int) -> AsyncIterator[Ticket]:
        """Admit one call (reserve, then take a slot), and settle it when it ends."""
        assert self.counters is not None
        ticket = Ticket(price=self.price_of(route))
        await self._reserve(state, route, prompt_bytes, ticket)
        provider = provider_of(route.gateway)
        limit = None if provider is None else self.limits.get(provider)
        try:
            async with self._slot(state, provider, limit):
                reporter = backoff_reporter().set(self._report if limit is not None else None)
                try:
                    yield ticket
                finally:
                    backoff_reporter().reset(reporter)
        except BaseException as exc:
            if provider is not None and limit is not None:
                await self._cool_after(provider, exc)
            answered = isinstance(exc, KernelError) and exc.context.get("status") is not None
            await self._settle(ticket, full=not answered and ticket.input_tokens is None)
            raise
        await self._settle(ticket, full=False)

    # ---------------------------------------------------------------- budgets

    def _key(self, budget: Budget, state: Any) -> str:
        turn = state.turn
        if budget.key is None:
            return self.agent_id if budget.scope == "agent" else str(turn.thread_id)
        context = BudgetContext(self.agent_id, turn.thread_id, turn.turn_id, state.host_context)
        try:
            key = budget.key(context)
            return validate_id(key, "budget key", max_length=256)
        except Exception as exc:
            raise InvalidInputError(
                "the budget's key callable failed or named no valid key: nothing was done",
                code=ErrorCode.BUDGET_KEY_FAILED,
                context={"budget": budget.label, "cause": type(exc).__name__},
            ) from exc

    async def _reserve(
        self, state: Any, route: ModelRoute, prompt_bytes: int, ticket: Ticket
    ) -> None:
        assert self.counters is not None
        keys = [(b, self._key(b, state)) for b in self.budgets]  # every key before any write
        named = getattr(route.gateway, "max_tokens", None)
        for budget, key in keys:
            output = named if isinstance(named, int) and named > 0 else budget.reserve_output
            tokens = prompt_bytes + GUIDE_ALLOWANCE + output
            cost = 0.0 if ticket.price is None else ticket.price.of(tokens - output, output)
            line = BudgetLine(budget.label, key, budget.window, budget.tokens, budget.cost)
            try:
                reserved = await self.counters.reserve(line, tokens, cost)
            except BaseException:
                await self._settle(ticket, full=False)
                raise
            if reserved.reservation is None:
                await self._settle(ticket, full=False)
                self.metrics.refused(budget.label, key_hash(key))
                usage, now = reserved.usage, datetime.now(UTC)
                ends = usage.window_end
                raise FlowControlError(
                    context={
                        "budget": budget.label,
                        "key": key,
                        "per": budget.window,
                        "window_end": None if ends is None else ends.isoformat(),
                        "retry_after": None if ends is None else (ends - now).total_seconds(),
                        "tokens_limit": usage.tokens_limit,
                        "tokens_used": usage.tokens_used,
                        "cost_limit": usage.cost_limit,
                        "cost_used": usage.cost_used,
                    }
                )
            self.metrics.reserved(budget.label, tokens)
            ticket.reservations.append((budget, reserved.reservation))

    async def _settle(self, ticket: Ticket, *, full: bool) -> None:
        """Settle every reservation (real usage, nothing, or in full); a settle that fails
        leaves its reservation counted in full, which errs on the side of spending less."""
        assert self.counters is not None
        spent_in, spent_out = ticket.input_tokens or 0, ticket.output_tokens
        while ticket.reservations:
            budget, reservation = ticket.reservations.pop()
            if full:
                tokens, cost = reservation.tokens, reservation.cost
            else:
                tokens = spent_in + spent_out
                cost = 0.0 if ticket.price is None else ticket.price.of(spent_in, spent_out)
            with contextlib.suppress(Exception):
                await self.counters.settle(reservation.id, tokens, cost)
                self.metrics.settled(budget.label, tokens)

    # ---------------------------------------------------------------- providers

    @contextlib.asynccontextmanager
    async def _slot(
        self, state: Any, provider: str | None, limit: Limit | None
    ) -> AsyncIterator[None]:
        if provider is None or limit is None:
            yield
            return
        assert self.counters is not None
        counters, loop = self.counters, asyncio.get_running_loop()
        request = SlotRequest(
            provider, new_id("call"), limit.concurrent, limit.per_minute, limit.lease
        )
        began, pause, reason = loop.time(), 0.01, ""
        try:
            while not (answer := await counters.acquire_slot(request)).granted:
                if not reason and state.progress is not None:
                    state.progress.emit(ProviderWait(provider, answer.reason, answer.wait))
                reason = answer.reason
                wait = min(answer.wait, pause) if answer.reason == "busy" else answer.wait
                pause = min(pause * 2, 0.25)
                if loop.time() + wait > state.deadline:
                    raise FlowControlError(
                        "no slot of the model provider came before the turn's deadline",
                        code=ErrorCode.PROVIDER_BUSY,
                        context={"provider": provider, "reason": answer.reason},
                    )
                await asyncio.sleep(wait)
            if reason:
                self.metrics.waited(provider, reason, loop.time() - began)
            renew = asyncio.create_task(self._renew(request))
            try:
                yield
            finally:
                renew.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renew
        finally:
            with contextlib.suppress(Exception):
                await counters.release_slot(provider, request.holder)

    async def _renew(self, request: SlotRequest) -> None:
        assert self.counters is not None
        while True:
            await asyncio.sleep(request.ttl / 3)
            with contextlib.suppress(Exception):
                await self.counters.acquire_slot(request)

    async def _report(self, provider: str, seconds: float, kind: str) -> float:
        """A gateway was told to back off: cool the provider down for every process."""
        if self.counters is None or provider not in self.limits:
            return seconds
        try:
            until = await self.counters.cool_down(provider, seconds)
        except Exception:  # the store is away: this call still waits what it was told
            return seconds
        self.metrics.cooled(provider, seconds)
        return max(seconds, (until - datetime.now(UTC)).total_seconds())

    async def _cool_after(self, provider: str, exc: BaseException) -> None:
        """A gateway that does not report its back-offs itself: its final error still cools
        the provider down (a repeated report changes nothing)."""
        if not isinstance(exc, KernelError):
            return
        seconds = exc.context.get("retry_after")
        if exc.context.get("kind") in _COOLING_KINDS and isinstance(seconds, int | float):
            with contextlib.suppress(Exception):
                await self._report(provider, float(seconds), str(exc.context["kind"]))


def build_gate(
    counters: FlowCounters | None,
    *,
    agent_id: str,
    budgets: tuple[Budget, ...],
    limits: Mapping[str, Limit],
    prices: Mapping[str, Price],
    routes: Mapping[str, ModelRoute],
    known_providers: frozenset[str],
    metrics: FlowMetrics,
) -> FlowGate | None:
    """The agent's gate (``None`` when nothing is declared), after checking what compile can:
    budgets need a store with counters, unique names and a price for every model a cost budget
    pays for; each limited provider must be one the models know or one of the agent's."""
    if not budgets and not limits:
        return None
    problems: list[str] = []
    if counters is None:
        problems.append("budgets and provider limits need a store with counters")
    if not all(isinstance(b, Budget) for b in budgets):
        problems.append("every budget must be a Budget")
    names = [b.label for b in budgets if isinstance(b, Budget)]
    if len(set(names)) != len(names):
        problems.append("two budgets have one name: give each its own name=")
    ours = {p for r in routes.values() if (p := provider_of(r.gateway)) is not None}
    unknown = sorted(set(limits) - known_providers - ours)
    if unknown:
        problems.append(f"provider_limits names unknown providers: {', '.join(unknown)}")
    if any(isinstance(b, Budget) and b.cost is not None for b in budgets):
        missing = sorted(
            {
                r.label
                for r in routes.values()
                if not (prices.get(r.label) or prices.get(r.model or ""))
            }
        )
        if missing:
            problems.append(f"a cost budget needs prices for: {', '.join(missing)}")
    if problems:
        raise ConfigurationError(
            "invalid budgets or provider limits: " + "; ".join(problems),
            context={"problems": problems},
        )
    return FlowGate(
        counters, agent_id=agent_id, budgets=budgets, limits=limits, prices=prices, metrics=metrics
    )
