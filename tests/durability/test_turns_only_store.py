"""A store built from ``TurnStorage`` alone: rules 1-7 hold, every other role refuses by name.

The minimal store an adapter author writes first is eight members (``storage.TurnStorage``).
It passes ``TurnConformance``. The checks that read back through the history role (the outbox
rows, the turn list) are left out by name (``NEEDS_HISTORY``, pinned: a test shows each of them
refuses for exactly that reason, so none is passed or skipped silently), and the methods of the
roles it lacks refuse with ``NOT_SUPPORTED``.
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


NEEDS_HISTORY = frozenset(
    {
        "test_bad_reconcile_arguments_are_refused",
        "test_bad_thread_and_turn_ids_are_refused_before_any_write",
        "test_cancellation_at_every_await",
        "test_effect_timeout_at_every_stage",
        "test_lost_write_at_every_write",
        "test_rule1_lost_lease_fences_the_commit",
        "test_rule3_commit_on_a_replayed_scope_is_refused",
        "test_rule3_concurrent_deliveries_of_one_turn_commit_once",
        "test_rule3_unique_turn_even_if_operation_ignores_prior_result",
        "test_rule4_nested_run_effect_is_refused",
        "test_rule5_commit_twice_is_refused",
        "test_rule5_outbox_of_another_turn_is_refused",
        "test_rule5_outbox_reads_back_in_commit_order",
        "test_rule5_result_checkpoint_and_outbox_commit_together",
        "test_rule5_result_for_another_turn_is_refused",
        "test_rule5_unstorable_result_commits_nothing",
        "test_rule6_failed_operation_commits_nothing_and_keeps_effects",
        "test_rule7_committed_turn_survives_a_restart",
        "test_turn_timeout_at_every_await",
    }
)
"""The ``TurnConformance`` checks that read their outcome back through ``HistoryStorage``."""


class TestTurnsOnlyStore(TurnConformance):
    @pytest.fixture
    def harness(self) -> TurnsOnlyHarness:
        return TurnsOnlyHarness()


for _name in NEEDS_HISTORY:  # left out by name, not collected (see the test below)
    setattr(TestTurnsOnlyStore, _name, None)


@pytest.mark.parametrize("name", sorted(NEEDS_HISTORY))
def test_what_is_left_out_needs_the_history_role_and_nothing_else(name: str) -> None:
    """Each check left out above refuses on a turns-only store only because it reads back
    through the history role; the rest of the suite runs (and passes) on it."""
    suite: Any = TurnConformance()
    with pytest.raises(pytest.skip.Exception, match="needs the history storage role"):
        getattr(suite, name)(TurnsOnlyHarness())


def test_the_left_out_checks_are_turn_conformance_checks() -> None:
    names = {name for name in dir(TurnConformance) if name.startswith("test_")}
    assert names > NEEDS_HISTORY
    runs = {name for name in names if getattr(TestTurnsOnlyStore, name) is not None}
    assert runs == names - NEEDS_HISTORY and len(runs) > len(NEEDS_HISTORY)


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
