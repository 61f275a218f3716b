"""A store built from ``TurnStorage`` alone: rules 1-7 hold, every other role refuses by name.

The minimal store an adapter author writes first is eight members (``storage.TurnStorage``).
It passes ``TurnConformance``; the checks that read back through another role are skipped with
that role's name, and the methods of the roles it lacks refuse with ``NOT_SUPPORTED``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

import pytest

from intention_kernel.contracts import DurabilityStore
from intention_kernel.contracts.errors import ErrorCode, UsageError
from intention_kernel.durability import DurableStore, MemoryStore, TurnStorage
from intention_kernel.durability.memory._adapter import MemoryTurns
from intention_kernel.testing.conformance import (
    ConformanceHarness,
    HistoryConformance,
    TurnConformance,
    commit_simple,
)

TURN_STORAGE_MEMBERS = {
    "open_turn",
    "lease",
    "begin_effect",
    "finish_effect",
    "commit",
    "read_turn",
    "get_receipt",
    "close",
}


class TurnsOnlyHarness(ConformanceHarness):
    roles = frozenset({"turns"})

    def __init__(self) -> None:
        super().__init__()
        self.state = MemoryStore()

    async def _open(self, *, lock_timeout: float) -> DurabilityStore:
        turns = MemoryTurns(self.state, lock_timeout=lock_timeout)
        return DurableStore(turns, lock_timeout=lock_timeout)

    async def revoke_lease(self, thread_id: str) -> None:
        epochs = self.state.epochs
        epochs[thread_id] = epochs.get(thread_id, 0) + 1


class TestTurnsOnlyStore(TurnConformance):
    @pytest.fixture
    def harness(self) -> TurnsOnlyHarness:
        return TurnsOnlyHarness()


def test_a_history_test_on_a_turns_only_store_is_skipped_by_the_role_name() -> None:
    suite: Any = HistoryConformance()
    with pytest.raises(pytest.skip.Exception, match="needs the history storage role"):
        suite.test_reconcile_uncertain_as_completed_replays_the_value(TurnsOnlyHarness())


def test_a_store_with_every_role_fails_a_history_test_instead_of_skipping() -> None:
    """``NOT_SUPPORTED`` from a store whose harness declares the role is a failure."""

    class Declared(TurnsOnlyHarness):
        roles = frozenset({"turns", "history"})

        async def _open(self, *, lock_timeout: float) -> DurabilityStore:
            turns = MemoryTurns(self.state, lock_timeout=lock_timeout)
            lying = DurableStore(turns, lock_timeout=lock_timeout)
            object.__setattr__(lying.roles, "history", _Refusing())
            return lying

    suite: Any = HistoryConformance()
    with pytest.raises(UsageError) as caught:
        suite.test_reconcile_uncertain_as_completed_replays_the_value(Declared())
    assert caught.value.code is ErrorCode.NOT_SUPPORTED


class _Refusing:
    """A history role whose every member refuses as a missing role would."""

    def __getattr__(self, name: str) -> Any:
        async def refuse(*args: object) -> None:
            raise UsageError("refused", code=ErrorCode.NOT_SUPPORTED, context={"role": "history"})

        return refuse


def test_turn_storage_is_eight_members() -> None:
    members = {name for name in vars(TurnStorage) if not name.startswith("_")}
    assert members == TURN_STORAGE_MEMBERS


def test_a_missing_role_refuses_with_not_supported_and_its_name() -> None:
    async def main() -> None:
        state = MemoryStore()
        store = DurableStore(MemoryTurns(state))
        await commit_simple(store, "t1", "turn-1")
        calls: dict[str, list[Coroutine[Any, Any, object]]] = {
            "history": [store.load_checkpoint("t1"), store.list_turns("t1")],
            "outbox": [store.claim("relay-1", limit=1, lease=1.0), store.outbox_stats()],
            "inspection": [
                store.store_status(),
                store.prune_records(older_than=datetime.now(UTC)),
            ],
        }
        for role, pending in calls.items():
            for call in pending:
                with pytest.raises(UsageError) as caught:
                    await call
                assert caught.value.code is ErrorCode.NOT_SUPPORTED
                assert caught.value.context == {"role": role}
        assert (await store.get_turn("t1", "turn-1")) is not None  # the turn role answers
        await store.close()

    asyncio.run(main())


def test_a_harness_that_misdeclares_its_roles_is_refused() -> None:
    class Lying(TurnsOnlyHarness):
        roles = frozenset({"turns", "history", "outbox", "inspection"})

    async def main() -> None:
        harness = Lying()
        with pytest.raises(AssertionError, match="declares the roles"):
            await harness.open()
        await harness.close_all()

    asyncio.run(main())
