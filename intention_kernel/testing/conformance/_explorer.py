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
import contextvars
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import JsonValue

from ...contracts.durability import DurabilityStore, TurnScope
from ...contracts.errors import (
    DurabilityError,
    EffectUncertainError,
    ErrorCode,
    KernelError,
    LeaseLostError,
    TurnConflictError,
)
from ...contracts.receipts import EffectAuthority, EffectExecution, ReceiptStatus
from ...contracts.turns import DurableTurnResult
from ._support import effect, latest_checkpoint, make_events, make_result, turn_storage

__all__ = [
    "KINDS",
    "SHAPES",
    "Fault",
    "Report",
    "explore",
    "interrupt",
    "run_case",
]

T = TypeVar("T")

Shape = Literal["no_effect", "one_effect", "two_effects", "concurrent_effects"]
Kind = Literal["cancel", "timeout", "effect_timeout", "lost_write"]
SHAPES: tuple[Shape, ...] = ("no_effect", "one_effect", "two_effects", "concurrent_effects")
KINDS: tuple[Kind, ...] = ("cancel", "timeout", "effect_timeout", "lost_write")
LOST_MODES = ("before", "after", "always")
_KEYS: dict[Shape, tuple[str, ...]] = {
    "no_effect": (),
    "one_effect": ("a",),
    "two_effects": ("a", "b"),
    "concurrent_effects": ("a", "b"),
}
_WRITES = ("begin_effect", "finish_effect", "commit")
_MAX_AT = 400
_EVENTS = 2
_CASE_SECONDS = 60.0
_delivery: contextvars.ContextVar[str] = contextvars.ContextVar("ik_explorer_delivery", default="")


@dataclass(frozen=True, slots=True)
class Fault:
    kind: Kind
    at: int
    """The suspension (or, for ``lost_write``, the write) of the first delivery it hits."""
    mode: str = ""
    """``lost_write`` only: ``before``, ``after`` or ``always``."""

    def __str__(self) -> str:
        return f"{self.kind}@{self.at}{'/' + self.mode if self.mode else ''}"


@dataclass
class Report:
    """Faults injected (by kind) and the invariant violations found, per store."""

    store: str
    faults: Counter[str] = field(default_factory=Counter)
    cases: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def injected(self) -> int:
        return sum(self.faults.values())

    def add(self, other: Report) -> None:
        self.faults.update(other.faults)
        self.cases += other.cases
        self.violations.extend(other.violations)
        self.seconds += other.seconds

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "store": self.store,
            "cases": self.cases,
            "faults_injected": self.injected,
            "faults_by_kind": dict(sorted(self.faults.items())),
            "violations": len(self.violations),
            "violation_examples": list[JsonValue](self.violations[:20]),
            "seconds": round(self.seconds, 1),
        }


class _Counted:
    """Awaits ``coro`` step by step, calling ``on_suspend`` each time it suspends."""

    def __init__(self, coro: Coroutine[Any, Any, T], on_suspend: Callable[[], None]) -> None:
        self._coro = coro
        self._on_suspend = on_suspend

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            self._on_suspend()
            try:
                value, error = (yield yielded), None
            except BaseException as exc:
                value, error = None, exc


class _Driver:
    """Counts the first delivery's suspensions and fires the planned fault at one of them."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.count = 0
        self.fired = False
        self.task: asyncio.Task[Any] | None = None
        self.turn_timeout: asyncio.Timeout | None = None
        self._effect_timeout: asyncio.Timeout | None = None
        self._armed_at = 0
        self.writes = 0

    def suspended(self) -> None:
        self.count += 1
        if self.fired:
            return
        kind, at = self.fault.kind, self.fault.at
        if kind == "cancel" and self.count == at:
            assert self.task is not None
            self.fired = True
            self.task.cancel()
        elif kind == "timeout" and self.count == at and self.turn_timeout is not None:
            self.fired = True
            self.turn_timeout.reschedule(asyncio.get_running_loop().time())
        elif (
            kind == "effect_timeout"
            and self._effect_timeout is not None
            and self.count - self._armed_at == at
        ):
            self.fired = True
            self._effect_timeout.reschedule(asyncio.get_running_loop().time())

    def arm(self, timeout: asyncio.Timeout) -> None:
        """Called by the operation around its first effect (``effect_timeout`` faults)."""
        if self._effect_timeout is None:
            self._effect_timeout = timeout
            self._armed_at = self.count

    def disarm(self) -> None:
        self._armed_at = -(10**9)

    def write_fails(self) -> str | None:
        """For each storage write of the first delivery: how it fails (``lost_write``)."""
        if self.fault.kind != "lost_write":
            return None
        self.writes += 1
        at, mode = self.fault.at, self.fault.mode
        if self.writes == at or (mode == "always" and self.writes > at):
            self.fired = True
            return "before" if mode == "always" else mode
        return None


class _Provider:
    """The external provider: counts calls per key and checks ``prepared`` is durable first."""

    def __init__(self, store: DurabilityStore, thread_id: str) -> None:
        self.store = store
        self.thread_id = thread_id
        self.calls: Counter[str] = Counter()
        self.entered: Counter[str] = Counter()
        """Operations the engine handed control to (a cancel may stop one before the call)."""
        self.problems: list[str] = []

    def operation(self, key: str) -> Callable[[EffectAuthority], Awaitable[JsonValue]]:
        async def call(authority: EffectAuthority) -> JsonValue:
            self.entered[key] += 1
            stored = await self.store.get_receipt(self.thread_id, authority.idempotency_key)
            if stored is None or stored.status is not ReceiptStatus.PREPARED:
                self.problems.append(f"I5a: provider called for {key} without a durable prepared")
            self.calls[key] += 1
            await asyncio.sleep(0)  # the request is out
            await asyncio.sleep(0)  # the answer is on its way back
            return {"key": key, "call": self.calls[key]}

        return call


@dataclass
class _Deliveries:
    executed: list[str] = field(default_factory=list)
    replayed: set[str] = field(default_factory=set)
    effect_timed_out: bool = False


def _operation(
    who: str,
    shape: Shape,
    provider: _Provider,
    seen: _Deliveries,
    driver: _Driver | None,
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
        keys = _KEYS[shape]
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
        events = make_events(scope, _EVENTS)
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


class _LostWrites:
    """Wraps one store's write primitives so the first delivery's writes fail as planned."""

    def __init__(self, store: DurabilityStore, driver: _Driver) -> None:
        self.store = turn_storage(store)
        self.saved: dict[str, Any] = {}
        for name in _WRITES:
            original = getattr(self.store, name, None)
            if original is None:
                continue
            self.saved[name] = original
            setattr(self.store, name, self._wrap(original, driver))

    @staticmethod
    def _wrap(original: Callable[..., Awaitable[Any]], driver: _Driver) -> Any:
        async def write(*args: Any) -> Any:
            how = driver.write_fails() if _delivery.get() == "A" else None
            if how == "before":
                raise DurabilityError(
                    "injected: the write was lost", code=ErrorCode.STORE_UNAVAILABLE, retryable=True
                )
            result = await original(*args)
            if how == "after":
                raise DurabilityError(
                    "injected: the answer was lost",
                    code=ErrorCode.STORE_UNAVAILABLE,
                    retryable=True,
                )
            return result

        return write

    def restore(self) -> None:
        for name in self.saved:
            delattr(self.store, name)


async def _deliver(
    store: DurabilityStore,
    thread_id: str,
    operation: Callable[[TurnScope], Awaitable[DurableTurnResult]],
    driver: _Driver | None,
) -> DurableTurnResult:
    if driver is None:
        _delivery.set("B")
        return await store.with_turn(thread_id, "turn-1", operation)
    _delivery.set("A")
    if driver.fault.kind != "timeout":
        return await store.with_turn(thread_id, "turn-1", operation)
    async with asyncio.timeout(None) as limit:
        driver.turn_timeout = limit
        return await store.with_turn(thread_id, "turn-1", operation)


async def _outcome(task: asyncio.Task[Any]) -> BaseException | None:
    try:
        await task
    except BaseException as exc:
        return exc
    return None


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
    provider = _Provider(store, thread_id)

    async def first_turn(scope: TurnScope) -> None:
        await scope.commit(make_result(scope), make_events(scope, 1))

    await store.with_turn(thread_id, "turn-0", first_turn)
    seen = _Deliveries()
    driver = _Driver(fault)
    lost = _LostWrites(store, driver) if fault.kind == "lost_write" else None
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
            _counted(_deliver(store, thread_id, operation_a, driver), driver)
        )
        driver.task = first
        if fault.kind == "lost_write":
            # No redelivery yet: what the first delivery left must be visible on its own.
            await asyncio.wait((first,), timeout=_CASE_SECONDS)
            hidden = await _hidden_prepared(store, thread_id) if first.done() else []
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
        error_a, error_b = await _outcome(first), await _outcome(second)
    finally:
        if lost is not None:
            lost.restore()
        if previous_retry is not None:
            store.record_retry_seconds = previous_retry  # type: ignore[attr-defined]
    problems = hidden + await _check(
        store, thread_id, shape, fault, driver, provider, seen, error_a, error_b
    )
    return driver.fired, [f"{shape} {fault}: {p}" for p in problems]


async def interrupt(
    work: Coroutine[Any, Any, T], *, at: int, kind: Literal["cancel", "timeout"] = "cancel"
) -> tuple[bool, T | None, BaseException | None]:
    """Run ``work`` as a task and cancel it (or expire an ``asyncio.timeout`` around it) at its
    ``at``-th suspension: whether the fault fired, the result, and the error it ended with.
    For a host's own tests: ``agent.run`` interrupted at every ``await`` of the pipeline."""
    driver = _Driver(Fault(kind, at))

    async def body() -> T:
        if kind == "cancel":
            return await work
        async with asyncio.timeout(None) as limit:
            driver.turn_timeout = limit
            return await work

    task = asyncio.create_task(_counted(body(), driver))
    driver.task = task
    error = await _outcome(task)
    return driver.fired, None if error is not None else task.result(), error


async def _hidden_prepared(store: DurabilityStore, thread_id: str) -> list[str]:
    """Receipts left ``prepared`` with no holder that operators would not see as uncertain."""
    listed = {
        r.idempotency_key
        for r in await store.list_receipts(status=ReceiptStatus.UNCERTAIN, thread_id=thread_id)
    }
    return [
        f"I5c: receipt {r.idempotency_key} left prepared and not listed as uncertain"
        for r in await store.list_receipts(status=ReceiptStatus.PREPARED, thread_id=thread_id)
        if r.idempotency_key not in listed
    ]


async def _counted(coro: Coroutine[Any, Any, T], driver: _Driver) -> T:
    result: T = await _Counted(coro, driver.suspended)
    return result


async def _check(
    store: DurabilityStore,
    thread_id: str,
    shape: Shape,
    fault: Fault,
    driver: _Driver,
    provider: _Provider,
    seen: _Deliveries,
    error_a: BaseException | None,
    error_b: BaseException | None,
) -> list[str]:
    problems = list(provider.problems)
    kind = fault.kind
    for who, error in (("A", error_a), ("B", error_b)):
        if error is None or isinstance(error, KernelError):
            continue
        if who == "A" and isinstance(error, asyncio.CancelledError) and kind == "cancel":
            continue
        if who == "A" and isinstance(error, TimeoutError) and kind == "timeout":
            continue
        problems.append(f"I8: delivery {who} ended with {type(error).__name__}")
    if driver.fired and kind == "cancel" and not isinstance(error_a, asyncio.CancelledError):
        problems.append(f"I8: the cancellation was not re-raised ({type(error_a).__name__})")
    if driver.fired and kind == "timeout" and error_a is None:
        problems.append("I8: the turn's timeout expired but the caller was not told")
    if isinstance(error_b, TurnConflictError):
        problems.append(f"I1: the duplicate delivery got {error_b.code}")
    elif error_b is not None and not isinstance(error_b, EffectUncertainError):
        problems.append(f"I9: the duplicate delivery failed with {type(error_b).__name__}")

    stored = await store.get_turn(thread_id, "turn-1")
    by = None
    if stored is not None and isinstance(stored.response, dict):
        by = stored.response.get("by")
    if by == "A" and "B" in seen.executed:
        problems.append("I1: the duplicate delivery ran a committed turn again")
    if by is None and error_b is None:
        problems.append("I4: the duplicate delivery returned but nothing is stored")
    checkpoint = await latest_checkpoint(store, thread_id)
    revision = 0 if checkpoint is None else checkpoint.revision
    if revision != (2 if stored is not None else 1):
        problems.append(f"I3: head revision {revision} after {'a' if stored else 'no'} commit")
    events = await store.read_outbox(thread_id=thread_id, turn_id="turn-1")
    if len(events) != (_EVENTS if stored is not None else 0):
        problems.append(f"I4: {len(events)} outbox events for turn-1 (stored: {bool(stored)})")

    uncertain = {
        r.idempotency_key
        for r in await store.list_receipts(status=ReceiptStatus.UNCERTAIN, thread_id=thread_id)
    }
    values = (
        stored.response.get("values", []) if stored and isinstance(stored.response, dict) else []
    )
    for key in _KEYS[shape]:
        full_key = effect(key).idempotency_key
        receipt = await store.get_receipt(thread_id, full_key)
        calls = provider.calls[key]
        if calls > 1:
            problems.append(f"I5b: provider called {calls} times for {key}")
        if receipt is None:
            if calls:
                problems.append(f"I5a: provider called for {key} with no receipt")
            continue
        status = receipt.status
        if status is ReceiptStatus.PREPARED and full_key not in uncertain:
            problems.append(f"I5c: receipt {key} left prepared and not listed as uncertain")
        if status is ReceiptStatus.COMPLETED and calls != 1:
            problems.append(f"I5: completed receipt {key} with {calls} provider calls")
        if status is ReceiptStatus.FAILED and calls != 0:
            problems.append(f"I5: failed receipt {key} although the provider was called")
        if kind == "lost_write" and provider.entered[key] == 0 and full_key in uncertain:
            # No operation for this key was ever entered: nothing can have been applied, so
            # reporting it as possibly applied (a lost answer to ``prepared``, say) is false.
            problems.append(
                f"I5: receipt {key} is uncertain although the provider was never called"
            )
        if (
            isinstance(values, list)
            and any(isinstance(v, dict) and v.get("key") == key for v in values)
            and status is not ReceiptStatus.COMPLETED
        ):
            problems.append(f"I4: the stored turn used {key} but its receipt is {status}")
    return problems


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
