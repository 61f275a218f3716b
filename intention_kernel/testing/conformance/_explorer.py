"""The fault explorer: a fault at every ``await`` and every write of a durable turn.

A ``kill -9`` stops everything at once; a cancelled task stops only the coroutine that awaits,
while work it started goes on. This explorer drives one turn of a store and injects a fault at
the Nth suspension of the delivering task (or its Nth storage write), for every N the path
has, with a duplicate delivery of the same turn waiting and a provider that counts calls per
key. After each case it checks the invariants of ``RELIABILITY.md`` that one process can see:

- I1: a committed turn is never run again (the duplicate replays it), never committed twice;
- I3/I4: the head moved exactly once per committed turn; its outbox events exist iff it did;
- I5: ``prepared`` is durable before the provider is called; at most one provider call per
  key; a ``completed`` receipt was called once, a ``failed`` one never; no receipt is left
  ``prepared`` unless operators see it as uncertain;
- I8: every error is typed, a cancellation is re-raised (never swallowed or replaced) and a
  timeout is reported as a timeout;
- I9: the duplicate delivery finishes (a result, or ``EffectUncertainError``).

Fault kinds: ``cancel`` (the caller is cancelled: client gone, shutdown), ``timeout`` (an
``asyncio.timeout`` around the turn expires, as ``agent.run(timeout=...)``), ``effect_timeout``
(a capability's own timeout around ``run_effect`` expires and the turn goes on to commit) and
``lost_write`` (one write of the turn - prepare, final receipt, commit - fails with a transient
store error: before it applied, after it applied with its answer lost, or for the rest of the
turn).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Literal, TypeVar

from pydantic import JsonValue

from ...contracts.durability import DurabilityStore, TurnScope
from ...contracts.errors import DurabilityError, LeaseLostError
from ...contracts.receipts import EffectExecution
from ...contracts.turns import DurableTurnResult
from ._faults import (
    KEYS,
    KINDS,
    LOST_MODES,
    SHAPES,
    Driver,
    Fault,
    Kind,
    LostWrites,
    Report,
    Shape,
    counted,
    delivery,
    outcome,
)
from ._invariants import EVENTS, CountingProvider, Deliveries, check_invariants, hidden_prepared
from ._support import effect, make_events, make_result

__all__ = [
    "KINDS",
    "SHAPES",
    "Fault",
    "Kind",
    "Report",
    "Shape",
    "explore",
    "interrupt",
    "run_case",
]

T = TypeVar("T")

_MAX_AT = 400
_CASE_SECONDS = 60.0


def _operation(
    who: str,
    shape: Shape,
    provider: CountingProvider,
    seen: Deliveries,
    driver: Driver | None,
) -> Callable[[TurnScope], Awaitable[DurableTurnResult]]:
    async def run(scope: TurnScope, key: str, first: bool) -> JsonValue:
        identity = effect(key)
        call = provider.operation(key)
        if driver is None or driver.fault.kind != "effect_timeout" or not first:
            execution: EffectExecution = await scope.run_effect(identity, call)
            return execution.value
        try:
            async with asyncio.timeout(None) as limit:
                driver.arm(limit)
                execution = await scope.run_effect(identity, call)
        except TimeoutError:
            seen.effect_timed_out = True
            return "timed out"  # a capability that owns its timeout goes on and answers
        finally:
            driver.disarm()
        return execution.value

    async def operation(scope: TurnScope) -> DurableTurnResult:
        if scope.prior_result is not None:
            seen.replayed.add(who)
            return scope.prior_result
        seen.executed.append(who)
        keys = KEYS[shape]
        if shape == "concurrent_effects":
            try:
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(run(scope, k, i == 0)) for i, k in enumerate(keys)]
            except BaseExceptionGroup as failed:
                raise _first(failed) from None
            values = [t.result() for t in tasks]
        else:
            values = [await run(scope, k, i == 0) for i, k in enumerate(keys)]
        result = make_result(scope, {"by": who, "values": values})
        events = make_events(scope, EVENTS)
        try:
            await scope.commit(result, events)
        except DurabilityError as exc:
            if not exc.retryable or isinstance(exc, LeaseLostError):
                raise
            await scope.commit(result, events)  # the same scope: an ambiguous commit is found
        return result

    return operation


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error a sequential turn would have raised (a cancellation only if nothing else)."""
    leaves: list[BaseException] = []
    pending = list(group.exceptions)
    while pending:
        exc = pending.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return next((e for e in leaves if not isinstance(e, asyncio.CancelledError)), leaves[0])


async def _deliver(
    store: DurabilityStore,
    thread_id: str,
    operation: Callable[[TurnScope], Awaitable[DurableTurnResult]],
    driver: Driver | None,
) -> DurableTurnResult:
    if driver is None:
        delivery.set("B")
        return await store.with_turn(thread_id, "turn-1", operation)
    delivery.set("A")
    if driver.fault.kind != "timeout":
        return await store.with_turn(thread_id, "turn-1", operation)
    async with asyncio.timeout(None) as limit:
        driver.turn_timeout = limit
        return await store.with_turn(thread_id, "turn-1", operation)


async def run_case(
    store: DurabilityStore,
    shape: Shape,
    fault: Fault,
    thread_id: str,
    *,
    duplicate: DurabilityStore | None = None,
) -> tuple[bool, list[str]]:
    """One case on a fresh thread: returns whether the fault fired and the violations.

    ``duplicate`` delivers the second copy of the turn (another instance over the same
    storage, as another worker would; default: ``store``)."""
    provider = CountingProvider(store, thread_id)

    async def first_turn(scope: TurnScope) -> None:
        await scope.commit(make_result(scope), make_events(scope, 1))

    await store.with_turn(thread_id, "turn-0", first_turn)
    seen = Deliveries()
    driver = Driver(fault)
    lost = LostWrites(store, driver) if fault.kind == "lost_write" else None
    previous_retry = getattr(store, "record_retry_seconds", None)
    if lost is not None and previous_retry is not None:
        store.record_retry_seconds = 0.05  # type: ignore[attr-defined]
    inside = asyncio.Event()
    op_a = _operation("A", shape, provider, seen, driver)

    async def operation_a(scope: TurnScope) -> DurableTurnResult:
        inside.set()
        return await op_a(scope)

    try:
        first = asyncio.create_task(
            counted(_deliver(store, thread_id, operation_a, driver), driver)
        )
        driver.task = first
        if fault.kind == "lost_write":
            # No redelivery yet: what the first delivery left must be visible on its own.
            await asyncio.wait((first,), timeout=_CASE_SECONDS)
            hidden = await hidden_prepared(store, thread_id) if first.done() else []
        else:
            waiter = asyncio.create_task(inside.wait())
            await asyncio.wait((first, waiter), return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            hidden = []
        op_b = _operation("B", shape, provider, seen, None)
        second = asyncio.create_task(_deliver(duplicate or store, thread_id, op_b, None))
        _, pending = await asyncio.wait((first, second), timeout=_CASE_SECONDS)
        if pending:
            for task in pending:
                task.cancel()
            await asyncio.wait(pending)
            return driver.fired, [f"{shape} {fault}: a delivery did not finish (I9)"]
        error_a, error_b = await outcome(first), await outcome(second)
    finally:
        if lost is not None:
            lost.restore()
        if previous_retry is not None:
            store.record_retry_seconds = previous_retry  # type: ignore[attr-defined]
    problems = hidden + await check_invariants(
        store, thread_id, shape, fault, driver, provider, seen, error_a, error_b
    )
    return driver.fired, [f"{shape} {fault}: {p}" for p in problems]


async def interrupt(
    work: Coroutine[Any, Any, T], *, at: int, kind: Literal["cancel", "timeout"] = "cancel"
) -> tuple[bool, T | None, BaseException | None]:
    """Run ``work`` as a task and cancel it (or expire an ``asyncio.timeout`` around it) at its
    ``at``-th suspension: whether the fault fired, the result, and the error it ended with.
    For a host's own tests: ``agent.run`` interrupted at every ``await`` of the pipeline."""
    driver = Driver(Fault(kind, at))

    async def body() -> T:
        if kind == "cancel":
            return await work
        async with asyncio.timeout(None) as limit:
            driver.turn_timeout = limit
            return await work

    task = asyncio.create_task(counted(body(), driver))
    driver.task = task
    error = await outcome(task)
    return driver.fired, None if error is not None else task.result(), error


def _cases(shape: Shape, kind: Kind) -> Generator[Fault, bool, None]:
    """Faults for every position, until one does not fire (the path has no more)."""
    modes = LOST_MODES if kind == "lost_write" else ("",)
    for mode in modes:
        for at in range(1, _MAX_AT + 1):
            fired = yield Fault(kind, at, mode)
            if not fired:
                break


async def explore(
    store: DurabilityStore,
    *,
    name: str,
    duplicate: DurabilityStore | None = None,
    shapes: tuple[Shape, ...] = SHAPES,
    kinds: tuple[Kind, ...] = KINDS,
    faults: int = 0,
    seed: int = 0,
    prefix: str = "x",
    budget_seconds: float | None = None,
) -> Report:
    """Every position of every kind for every shape (deterministic), then random cases (which
    shape, kind, position and mode) until ``faults`` faults were injected in all, or
    ``budget_seconds`` passed. ``duplicate``: see ``run_case``."""
    report = Report(store=name)
    started = time.monotonic()
    longest: Counter[tuple[Shape, Kind]] = Counter()
    number = 0

    async def one(shape: Shape, fault: Fault) -> bool:
        nonlocal number
        number += 1
        fired, problems = await run_case(
            store, shape, fault, f"{prefix}-{number}", duplicate=duplicate
        )
        report.cases += 1
        if fired:
            report.faults[fault.kind] += 1
            longest[(shape, fault.kind)] = max(longest[(shape, fault.kind)], fault.at)
        report.violations.extend(problems)
        return fired

    for shape in shapes:
        for kind in kinds:
            cases = _cases(shape, kind)
            fault = next(cases)
            try:
                while True:
                    fault = cases.send(await one(shape, fault))
            except StopIteration:
                pass
    rng = random.Random(seed)
    reachable = [key for key, at in longest.items() if at > 0]
    while reachable and report.injected < faults:
        if budget_seconds is not None and time.monotonic() - started > budget_seconds:
            break
        shape, kind = rng.choice(reachable)
        mode = rng.choice(LOST_MODES) if kind == "lost_write" else ""
        await one(shape, Fault(kind, rng.randint(1, longest[(shape, kind)]), mode))
    report.seconds = time.monotonic() - started
    return report
