"""Shared pieces of the conformance suite: the harness contract and small builders."""

from __future__ import annotations

import asyncio
import functools
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from pydantic import JsonValue

from ...contracts.checkpoint import KernelCheckpoint, Message
from ...contracts.durability import DurabilityStore, TurnScope
from ...contracts.errors import EffectNotAppliedError, ErrorCode, UsageError
from ...contracts.events import EventCategory, KernelEvent
from ...contracts.ids import new_id
from ...contracts.receipts import EffectAuthority, EffectExecution, EffectIdentity
from ...contracts.turns import DurableTurnResult

__all__ = [
    "ConformanceHarness",
    "Provider",
    "commit_simple",
    "conformance_test",
    "effect",
    "latest_checkpoint",
    "make_events",
    "make_result",
    "turn_storage",
]

H = TypeVar("H", bound="ConformanceHarness")

ROLES = frozenset({"turns", "history", "outbox", "inspection"})
"""The storage roles of a store (``intention_kernel.durability.storage``)."""


async def latest_checkpoint(store: DurabilityStore, thread_id: str) -> KernelCheckpoint | None:
    """``load_checkpoint``; for a store without the history role, the checkpoint a new turn
    of the thread opens with (rule 2, through ``TurnStorage.open_turn`` alone)."""
    roles = getattr(store, "roles", None)
    if roles is None or roles.history is not None:
        return await store.load_checkpoint(thread_id)
    async with store.turn(thread_id, new_id("turn")) as scope:
        return scope.checkpoint


def turn_storage(store: object) -> Any:
    """The ``TurnStorage`` role of a ``DurableStore`` (for tests that make its writes fail)."""
    roles = getattr(store, "roles", None)
    assert roles is not None, "the store must be a DurableStore (composed from storage roles)"
    return roles.turns


class ConformanceHarness(ABC):
    """What an adapter's test module provides to run the suite.

    ``open()`` returns a new adapter instance over the *same* storage every time it is called
    within one test (calling it again models a process restart). Each test gets a fresh harness
    from the ``harness`` fixture, so storage is fresh per test.
    """

    roles: frozenset[str] = ROLES
    """The storage roles this harness's store is built with (``turns`` always). A test that
    needs a role the store lacks is skipped with that role's name, never passed; the shipped
    stores have all four. ``open`` checks the declaration against the store it opened."""

    def __init__(self) -> None:
        self._opened: list[DurabilityStore] = []

    async def open(self, *, lock_timeout: float = 10.0) -> DurabilityStore:
        store = await self._open(lock_timeout=lock_timeout)
        self._opened.append(store)
        composed = getattr(store, "roles", None)
        if composed is not None:
            present = {role for role in ROLES if getattr(composed, role, None) is not None}
            assert present == set(self.roles), (
                f"{type(self).__name__} declares the roles {sorted(self.roles)} but its store "
                f"has {sorted(present)}"
            )
        return store

    async def close_all(self) -> None:
        while self._opened:
            await self._opened.pop().close()
        await self._cleanup()

    @abstractmethod
    async def _open(self, *, lock_timeout: float) -> DurabilityStore:
        """A new adapter instance over this test's storage."""

    @abstractmethod
    async def revoke_lease(self, thread_id: str) -> None:
        """Act as another holder taking the thread over: bump its lease epoch in the store,
        so the current holder's next write is fenced."""

    async def _cleanup(self) -> None:  # noqa: B027 - optional hook
        """Drop this test's storage (optional)."""

    # Optional: write raw rows as another writer (or a disk fault) could, so the poison-data
    # tests can show that one unreadable row stays one thread's problem. Without them those
    # tests are skipped.

    async def corrupt_turn(self, thread_id: str, turn_id: str, text: str) -> None:
        """Replace the stored result text of a committed turn with ``text``."""
        pytest.skip(f"{type(self).__name__} cannot write raw rows")

    async def corrupt_receipt(self, thread_id: str, idempotency_key: str, text: str) -> None:
        """Replace the stored document of a receipt with ``text``."""
        pytest.skip(f"{type(self).__name__} cannot write raw rows")

    async def corrupt_event(self, position: int, text: str) -> None:
        """Replace the stored document of the outbox event at ``position`` with ``text``."""
        pytest.skip(f"{type(self).__name__} cannot write raw rows")

    stateful_examples: int = 40
    """How many random programs the stateful test runs against this adapter."""


def conformance_test(
    fn: Callable[[Any, H], Coroutine[Any, Any, None]],
) -> Callable[[Any, H], None]:
    """Run an ``async`` test body in a fresh event loop and close what it opened."""

    @functools.wraps(fn)
    def wrapper(self: Any, harness: H) -> None:
        async def main() -> None:
            try:
                await fn(self, harness)
            finally:
                await harness.close_all()

        try:
            asyncio.run(main())
        except UsageError as exc:
            role = exc.context.get("role")
            if exc.code is ErrorCode.NOT_SUPPORTED and role not in harness.roles:
                pytest.skip(f"needs the {role} storage role, which this store lacks")
            raise

    return wrapper


def effect(key: str, capability: str = "payments.charge") -> EffectIdentity:
    return EffectIdentity(f"{capability}:{key}", capability, step_id="step-1")


class Provider:
    """A fake external provider counting calls per idempotency key."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def returning(self, value: JsonValue) -> Callable[[EffectAuthority], Awaitable[JsonValue]]:
        async def operation(authority: EffectAuthority) -> JsonValue:
            self.calls[authority.idempotency_key] += 1
            return value

        return operation

    def raising(self, error: BaseException) -> Callable[[EffectAuthority], Awaitable[JsonValue]]:
        async def operation(authority: EffectAuthority) -> JsonValue:
            self.calls[authority.idempotency_key] += 1
            raise error

        return operation

    def not_applied(self) -> Callable[[EffectAuthority], Awaitable[JsonValue]]:
        return self.raising(EffectNotAppliedError("card declined before capture"))

    def total(self) -> int:
        return sum(self.calls.values())


def make_result(
    scope: TurnScope, response: JsonValue = None, *, text: str = "ok"
) -> DurableTurnResult:
    """The successor of the scope's checkpoint with one more message pair."""
    previous = scope.checkpoint
    revision = 1 if previous is None else previous.revision + 1
    messages = [] if previous is None else list(previous.messages)
    messages += [
        Message(role="user", text=f"question {scope.turn_id}", turn_id=scope.turn_id),
        Message(role="assistant", text=text, turn_id=scope.turn_id),
    ]
    checkpoint = KernelCheckpoint(
        revision=revision, agent_fingerprint="agent-fp", messages=messages
    )
    return DurableTurnResult(
        thread_id=scope.thread_id,
        turn_id=scope.turn_id,
        trace_id=f"trace-{scope.turn_id}",
        response={"text": text} if response is None else response,
        checkpoint=checkpoint,
    )


def make_events(scope: TurnScope, count: int = 3) -> list[KernelEvent]:
    return [
        KernelEvent(
            id=new_id("evt"),
            type=f"test.event{i}",
            occurred_at=datetime.now(UTC),
            thread_id=scope.thread_id,
            turn_id=scope.turn_id,
            sequence=i,
            correlation_id=f"trace-{scope.turn_id}",
            category=EventCategory.INTEGRATION,
            data={"i": i},
        )
        for i in range(count)
    ]


async def commit_simple(
    store: DurabilityStore,
    thread_id: str,
    turn_id: str,
    *,
    effects: list[tuple[EffectIdentity, Callable[[EffectAuthority], Awaitable[JsonValue]]]]
    | None = None,
    fingerprint: str | None = None,
) -> tuple[DurableTurnResult, list[EffectExecution], bool]:
    """Run one turn that runs ``effects`` then commits; returns (result, executions, replayed)."""

    async def operation(
        scope: TurnScope,
    ) -> tuple[DurableTurnResult, list[EffectExecution], bool]:
        if scope.prior_result is not None:
            return scope.prior_result, [], True
        executions = [await scope.run_effect(e, op) for e, op in effects or []]
        result = make_result(scope, {"effects": [x.value for x in executions]})
        await scope.commit(result, make_events(scope))
        return result, executions, False

    return await store.with_turn(thread_id, turn_id, operation, request_fingerprint=fingerprint)
