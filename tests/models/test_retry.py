"""``RetryPolicy`` and ``with_retries``: bounded, jittered, deadline-aware, in one place."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable

import pytest

from intention_kernel.contracts.errors import ConfigurationError, ModelGatewayError
from intention_kernel.models import Failure, RetryPolicy
from intention_kernel.models._retry import stream_with_retries, with_retries

from .fakes import Clock, policy

PASSING = Failure("server", True, "p: server error (500)", 500)
FINAL = Failure("bad_request", False, "p rejected the request (400)", 400)


class Flaky(Exception):
    pass


def classify(exc: Exception) -> Failure | None:
    return exc.args[0] if isinstance(exc, Flaky) else None


def failing(
    *failures: Failure, result: str = "ok"
) -> tuple[list[float], Callable[[float], Awaitable[str]]]:
    timeouts: list[float] = []
    queue = list(failures)

    async def call(seconds: float) -> str:
        timeouts.append(seconds)
        if queue:
            raise Flaky(queue.pop(0))
        return result

    return timeouts, call


def test_backoff_doubles_up_to_the_cap_with_jitter_and_retry_after() -> None:
    steady = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=lambda: 1.0)
    assert [steady.backoff(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    low = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=lambda: 0.0)
    assert [low.backoff(n) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]  # half is never random
    assert steady.backoff(1, retry_after=9.0) == 9.0
    assert steady.backoff(3, retry_after=0.1) == 2.0


@pytest.mark.parametrize(
    "values",
    [{"attempts": 0}, {"base_delay": 0}, {"deadline": -1}, {"attempt_timeout": 0}],
)
def test_a_policy_with_nonsense_values_is_refused(values: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**values)  # type: ignore[arg-type]


async def test_passing_failures_are_retried_and_each_call_is_bounded() -> None:
    clock = Clock()
    timeouts, call = failing(PASSING, PASSING)
    result = await with_retries(call, classify, policy(clock, attempt_timeout=30.0), {})
    assert result == "ok"
    assert clock.waits == [0.5, 1.0]
    assert timeouts == [30.0, 30.0, 30.0]


async def test_the_last_attempt_is_cut_to_what_is_left_of_the_deadline() -> None:
    clock = Clock()
    timeouts, call = failing(PASSING, PASSING)
    await with_retries(call, classify, policy(clock, deadline=10.0, attempt_timeout=30.0), {})
    assert timeouts == [10.0, 9.5, 8.5]


async def test_a_final_failure_is_raised_at_once_with_its_context() -> None:
    clock = Clock()
    _, call = failing(FINAL)
    with pytest.raises(ModelGatewayError) as raised:
        await with_retries(call, classify, policy(clock), {"provider": "p", "task": "compose"})
    assert raised.value.retryable is False
    assert raised.value.message == "p rejected the request (400)"
    assert raised.value.context == {
        "provider": "p",
        "task": "compose",
        "kind": "bad_request",
        "status": 400,
        "attempts": 1,
        "retry_after": None,
    }
    assert clock.waits == []


async def test_other_exceptions_pass_through_untouched() -> None:
    async def call(seconds: float) -> str:
        raise KeyError("a bug, not a provider failure")

    with pytest.raises(KeyError):
        await with_retries(call, classify, policy(Clock()), {})


def streaming(
    *plans: tuple[list[str], Failure | None],
) -> Callable[[float], AsyncGenerator[str, None]]:
    """Attempts that yield their items, then fail (or end when the failure is ``None``)."""
    queue = list(plans)

    async def attempt(seconds: float) -> AsyncGenerator[str, None]:
        items, failure = queue.pop(0)
        for item in items:
            yield item
        if failure is not None:
            raise Flaky(failure)

    return attempt


async def test_a_stream_restarts_only_after_it_had_yielded() -> None:
    clock = Clock()
    attempt = streaming(([], PASSING), (["a", "b"], PASSING), (["a", "b", "c"], None))
    retried = stream_with_retries(attempt, classify, policy(clock), {}, lambda: "RESTART")
    assert [item async for item in retried] == ["a", "b", "RESTART", "a", "b", "c"]
    assert clock.waits == [0.5, 1.0]


async def test_a_stream_fails_finally_like_a_call() -> None:
    attempt = streaming((["a"], PASSING), (["a"], FINAL))
    retried = stream_with_retries(attempt, classify, policy(Clock()), {}, lambda: "RESTART")
    seen: list[str] = []
    with pytest.raises(ModelGatewayError) as raised:  # noqa: PT012 - the items before it count
        async for item in retried:
            seen.append(item)
    assert seen == ["a", "RESTART", "a"]
    assert (raised.value.retryable, raised.value.context["attempts"]) == (False, 2)
