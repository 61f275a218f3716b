"""The durability adapter conformance suite: one test per rule of the contract.

Any adapter - ours or yours - runs it by subclassing ``DurabilityConformance`` and providing a
``harness`` fixture that returns a ``ConformanceHarness``::

    import pytest
    from intention_kernel.testing.conformance import ConformanceHarness, DurabilityConformance

    class MyHarness(ConformanceHarness):
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

from ._support import (
    ConformanceHarness,
    Provider,
    commit_simple,
    conformance_test,
    effect,
    make_events,
    make_result,
    turn_storage,
)
from .cancellation import Cancellation
from .interrupted import InterruptedReceipts
from .misuse import Misuse
from .poison import PoisonData
from .public_face import PublicFace
from .reconcile import Reconcile
from .rule1_serialize import Rule1Serialize
from .rule2_checkpoint import Rule2Checkpoint
from .rule3_replay import Rule3Replay
from .rule4_effects import Rule4Effects
from .rule5_commit import Rule5Commit
from .rule6_failed_operation import Rule6FailedOperation
from .rule7_restart import Rule7Restart
from .stateful import Stateful
from .thread_filters import ThreadFilters

__all__ = [
    "ConformanceHarness",
    "DurabilityConformance",
    "Provider",
    "commit_simple",
    "conformance_test",
    "effect",
    "make_events",
    "make_result",
    "turn_storage",
]


class DurabilityConformance(
    Rule1Serialize,
    Rule2Checkpoint,
    Rule3Replay,
    Rule4Effects,
    Rule5Commit,
    Rule6FailedOperation,
    Rule7Restart,
    Reconcile,
    InterruptedReceipts,
    Cancellation,
    Misuse,
    PoisonData,
    PublicFace,
    Stateful,
    ThreadFilters,
):
    """Every conformance test. Subclass it (with a ``Test`` prefix) and define ``harness``."""
