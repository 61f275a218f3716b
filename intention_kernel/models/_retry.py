"""Bounded, deadline-aware retries of one provider call, in one place for every gateway.

Why ours and not the SDKs': each SDK retries on its own schedule and knows nothing of the
kernel's deadline. The gateways build their clients with ``max_retries=0`` and retry here:
jittered exponential backoff, at least as long as the provider's ``retry-after`` asks, never past
``RetryPolicy.deadline``, and only for failures that may pass (rate limits, overload, 5xx,
timeouts, lost connections). Everything else fails at once.

``stream_with_retries`` does the same for a streamed call: a failure before anything was
yielded is retried exactly like ``with_retries``; after items were yielded, a retry first
yields a restart marker so the consumer drops what it showed of the failed attempt.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..contracts.errors import ConfigurationError, ModelGatewayError
from ..contracts.flow import report_backoff

__all__ = ["Failure", "RetryPolicy", "stream_with_retries", "with_retries"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a gateway retries one request.

    ``attempts`` calls at most; between them an exponential backoff from ``base_delay`` capped
    at ``max_delay``, with jitter (half fixed, half random) so clients that failed together do
    not retry together, and at least the provider's ``retry-after``. ``deadline`` bounds the
    whole request, waits included: a retry that would start after it is not made.
    ``attempt_timeout`` bounds one call by the wall clock, however its body arrives (shortened
    to what is left of the deadline). ``sleep``, ``clock`` and ``jitter`` are injectable for
    tests.
    """

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 10.0
    deadline: float = 120.0
    attempt_timeout: float = 60.0
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    jitter: Callable[[], float] = field(default=random.random, compare=False)

    def __post_init__(self) -> None:
        numbers = {
            "base_delay": self.base_delay,
            "max_delay": self.max_delay,
            "deadline": self.deadline,
            "attempt_timeout": self.attempt_timeout,
        }
        bad = sorted(k for k, v in numbers.items() if not v > 0)
        if not isinstance(self.attempts, int) or self.attempts < 1:
            bad.insert(0, "attempts")
        if bad:
            raise ConfigurationError(
                "retry policy values must be positive", context={"invalid": bad}
            )

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        ceiling: float = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        delay: float = ceiling * (0.5 + 0.5 * self.jitter())
        return max(delay, retry_after) if retry_after is not None else delay


@dataclass(frozen=True, slots=True)
class Failure:
    """A provider failure as a gateway classified it: what kind, whether it may pass, the safe
    message to raise, and the wait the provider asked for."""

    kind: str
    """``rate_limit``, ``overloaded``, ``server``, ``timeout``, ``connection`` (retryable);
    ``authentication``, ``permission``, ``bad_request``, ``not_found``, ``quota``,
    ``configuration`` (not retryable)."""
    retryable: bool
    message: str
    status: int | None = None
    retry_after: float | None = None


async def with_retries(
    call: Callable[[float], Awaitable[T]],
    classify: Callable[[Exception], Failure | None],
    policy: RetryPolicy,
    context: dict[str, Any],
) -> T:
    """Run ``call(timeout)`` until it succeeds, a failure is final, or the policy is spent.

    ``classify`` maps an exception to a ``Failure`` (``None``: not a provider failure, raised as
    it is). The raised ``ModelGatewayError`` carries ``context`` plus ``kind``, ``status``,
    ``attempts`` and ``retry_after``; its ``retryable`` says whether the caller may try later.
    """
    deadline = policy.clock() + policy.deadline
    attempt = 0
    while True:
        attempt += 1
        seconds = max(0.001, min(policy.attempt_timeout, deadline - policy.clock()))
        # The SDKs' timeouts bound each read, not the answer: a body that trickles in a byte
        # at a time resets them forever. This bounds the attempt by the wall clock too.
        bound = asyncio.timeout(seconds)
        try:
            async with bound:
                return await call(seconds)
        except Exception as exc:
            failure = classify(exc)
            if failure is None and bound.expired():
                failure = _timed_out(context)
            if failure is None:
                raise
            shared = await _shared(failure, context)
            await policy.sleep(max(_wait(failure, exc, attempt, policy, deadline, context), shared))


async def stream_with_retries(
    attempt: Callable[[float], AsyncGenerator[T, None]],
    classify: Callable[[Exception], Failure | None],
    policy: RetryPolicy,
    context: dict[str, Any],
    restart: Callable[[], T],
) -> AsyncGenerator[T, None]:
    """Yield what ``attempt(timeout)`` yields, retrying it as ``with_retries`` retries a call.

    Each attempt's whole stream is bounded by ``attempt_timeout`` (cut to what is left of the
    deadline), like a call that answers at once: a stream that stalls is a ``timeout``. After an
    attempt that had yielded something fails and is retried, ``restart()`` is yielded before
    the next attempt's items. The timer runs only while waiting for the next item, never across
    a ``yield``, so the consumer's own pace is not cut short by a cancellation in its code.
    """
    deadline = policy.clock() + policy.deadline
    number = 0
    shown = False
    while True:
        number += 1
        seconds = max(0.001, min(policy.attempt_timeout, deadline - policy.clock()))
        ends = policy.clock() + seconds
        items = attempt(seconds)
        try:
            while True:
                try:
                    async with asyncio.timeout(max(0.0, ends - policy.clock())):
                        item = await anext(items)
                except StopAsyncIteration:
                    return
                except Exception as exc:
                    failure = classify(exc)
                    if failure is None and isinstance(exc, TimeoutError):
                        failure = _timed_out(context)
                    if failure is None:
                        raise
                    shared = await _shared(failure, context)
                    delay = max(_wait(failure, exc, number, policy, deadline, context), shared)
                    break
                yield item
                shown = True
        finally:
            await items.aclose()
        if shown:
            shown = False
            yield restart()
        await policy.sleep(delay)


async def _shared(failure: Failure, context: dict[str, Any]) -> float:
    """A rate limit or overload with a ``retry-after`` cools the provider down for every
    process on the kernel's store (``contracts.flow``); the wait that cool-down asks for (0
    outside a kernel's call, or for another failure). Reported before a final failure too, so
    the other processes hold back even when this call gives up."""
    if failure.kind not in ("rate_limit", "overloaded") or failure.retry_after is None:
        return 0.0
    shared = await report_backoff(context.get("provider"), failure.retry_after, failure.kind)
    return 0.0 if shared is None else shared


def _timed_out(context: dict[str, Any]) -> Failure:
    """The failure of an attempt cut off by its wall-clock bound."""
    where = context.get("provider") or "the provider"
    return Failure("timeout", True, f"{where}: the request timed out")


def _wait(
    failure: Failure,
    exc: Exception,
    attempt: int,
    policy: RetryPolicy,
    deadline: float,
    context: dict[str, Any],
) -> float:
    """The wait before the next attempt, or the ``ModelGatewayError`` to raise (final failure,
    attempts spent, or no time left before the deadline)."""
    details = {
        **context,
        "kind": failure.kind,
        "status": failure.status,
        "attempts": attempt,
        "retry_after": failure.retry_after,
    }
    if not failure.retryable:
        raise ModelGatewayError(failure.message, retryable=False, context=details) from exc
    if attempt >= policy.attempts:
        message = f"{failure.message}; gave up after {attempt} attempts"
        raise ModelGatewayError(message, context=details) from exc
    delay = policy.backoff(attempt, failure.retry_after)
    if policy.clock() + delay >= deadline:
        message = f"{failure.message}; no time left before the deadline to try again"
        raise ModelGatewayError(message, context=details) from exc
    return delay
