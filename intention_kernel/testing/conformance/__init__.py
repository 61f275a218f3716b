"""The durability adapter conformance suite: one test per rule of the contract, by role.

``TurnConformance`` holds a store's ``TurnStorage`` to rules 1-7 (with cancellation and
misuse); ``HistoryConformance`` its reads and reconciliation; ``InspectionConformance`` the
operator queries; ``OutboxSourceConformance`` (``.outbox``) the relay's source;
``InboxConformance`` (``.inbox``) the turn inbox's ``InboxStorage``.
``DurabilityConformance`` is all of them plus the cross-role tests (poison data, the public
face, the stateful model). A test needing a role the harness's store lacks (``roles``) is
skipped with that role's name.

Any adapter - ours or yours - runs it by subclassing ``DurabilityConformance`` and providing a
``harness`` fixture that returns a ``ConformanceHarness``::

    import pytest
    from intention_kernel.testing.conformance import ConformanceHarness, DurabilityConformance

    class MyHarness(ConformanceHarness):
        def __init__(self, directory):
            super().__init__()
            self.path = directory / "store.db"

        async def _open(self, *, lock_timeout):
            return MyDurability(self.path, lock_timeout=lock_timeout)

        async def revoke_lease(self, thread_id):
            ...  # bump the thread's lease epoch in the store

    class TestMyAdapter(DurabilityConformance):
        @pytest.fixture
        def harness(self, tmp_path):
            return MyHarness(tmp_path)

Test names start with the rule they check (``test_rule4_...``). The suite needs the
``testing`` extra (pytest, hypothesis); it does not need an asyncio pytest plugin.
"""

from ._cancellation import Cancellation
from ._interrupted import InterruptedReceipts
from ._misuse import Misuse
from ._poison import PoisonData
from ._public_face import PublicFace
from ._reconcile import Reconcile
from ._rule1_serialize import Rule1Serialize
from ._rule2_checkpoint import Rule2Checkpoint
from ._rule3_replay import Rule3Replay
from ._rule4_effects import Rule4Effects
from ._rule5_commit import Rule5Commit
from ._rule6_failed_operation import Rule6FailedOperation
from ._rule7_restart import Rule7Restart
from ._stateful import Stateful
from ._support import (
    ROLES,
    ConformanceHarness,
    Provider,
    commit_simple,
    conformance_test,
    effect,
    make_events,
    make_result,
    turn_storage,
)
from ._thread_filters import ThreadFilters

__all__ = [
    "ROLES",
    "ConformanceHarness",
    "DurabilityConformance",
    "HistoryConformance",
    "InspectionConformance",
    "Provider",
    "TurnConformance",
    "commit_simple",
    "conformance_test",
    "effect",
    "make_events",
    "make_result",
    "turn_storage",
]


class TurnConformance(
    Rule1Serialize,
    Rule2Checkpoint,
    Rule3Replay,
    Rule4Effects,
    Rule5Commit,
    Rule6FailedOperation,
    Rule7Restart,
    Cancellation,
    Misuse,
):
    """Rules 1-7 over the ``TurnStorage`` role, with cancellation and misuse. Checks that read
    back through another role (the outbox rows, the turn list) are skipped by that role's name
    for a store without it."""


class HistoryConformance(Reconcile, InterruptedReceipts):
    """The ``HistoryStorage`` role: receipt listings, reconciliation and its audit records."""


class InspectionConformance(ThreadFilters):
    """The ``InspectionStorage`` role: thread listings and their filters."""


class DurabilityConformance(
    TurnConformance,
    HistoryConformance,
    InspectionConformance,
    PoisonData,
    PublicFace,
    Stateful,
):
    """Every conformance test. Subclass it (with a ``Test`` prefix) and define ``harness``."""
