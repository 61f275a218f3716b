"""Faults and how they are injected: the planned fault, a coroutine awaited step by step, the
driver that fires the fault at one suspension, and storage writes that fail as planned."""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import JsonValue

from ...contracts.durability import DurabilityStore
from ...contracts.errors import DurabilityError, ErrorCode
from ._support import turn_storage

__all__ = [
    "KEYS",
    "KINDS",
    "LOST_MODES",
    "SHAPES",
    "Counted",
    "Driver",
    "Fault",
    "Kind",
    "LostWrites",
    "Report",
    "Shape",
    "counted",
    "delivery",
    "outcome",
]

T = TypeVar("T")

Shape = Literal["no_effect", "one_effect", "two_effects", "concurrent_effects"]
Kind = Literal["cancel", "timeout", "effect_timeout", "lost_write"]
SHAPES: tuple[Shape, ...] = ("no_effect", "one_effect", "two_effects", "concurrent_effects")
KINDS: tuple[Kind, ...] = ("cancel", "timeout", "effect_timeout", "lost_write")
LOST_MODES = ("before", "after", "always")
KEYS: dict[Shape, tuple[str, ...]] = {
    "no_effect": (),
    "one_effect": ("a",),
    "two_effects": ("a", "b"),
    "concurrent_effects": ("a", "b"),
}
_WRITES = ("begin_effect", "finish_effect", "commit")
delivery: contextvars.ContextVar[str] = contextvars.ContextVar("ik_explorer_delivery", default="")


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


class Counted:
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


class Driver:
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


class LostWrites:
    """Wraps one store's write primitives so the first delivery's writes fail as planned."""

    def __init__(self, store: DurabilityStore, driver: Driver) -> None:
        self.store = turn_storage(store)
        self.saved: dict[str, Any] = {}
        for name in _WRITES:
            original = getattr(self.store, name, None)
            if original is None:
                continue
            self.saved[name] = original
            setattr(self.store, name, self._wrap(original, driver))

    @staticmethod
    def _wrap(original: Callable[..., Awaitable[Any]], driver: Driver) -> Any:
        async def write(*args: Any) -> Any:
            how = driver.write_fails() if delivery.get() == "A" else None
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


async def counted(coro: Coroutine[Any, Any, T], driver: Driver) -> T:
    result: T = await Counted(coro, driver.suspended)
    return result


async def outcome(task: asyncio.Task[Any]) -> BaseException | None:
    try:
        await task
    except BaseException as exc:
        return exc
    return None
