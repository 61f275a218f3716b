"""Public test helpers. ``MemoryDurability`` is the in-process, test-only adapter.

``ScriptedModelGateway`` answers model requests from a script; ``EventCollector`` is an
in-memory ``EventSink`` for relay and kernel tests. The outbox-source suite is
``intention_kernel.testing.conformance.outbox``. The adapter conformance suite lives in
``intention_kernel.testing.conformance`` (both need the ``testing`` extra: pytest and
hypothesis). ``CrashPoint``, ``crash_hook`` and ``raise_at`` arm the named crash points the
stores pass (a private module: no-ops unless a test installs a hook).
"""

from .._crashpoints import CrashPoint, SimulatedCrash, crash_hook, raise_at
from ..durability.memory import MemoryDurability, MemoryStore
from ._events import EventCollector
from ._gateway import ScriptedModelGateway, ScriptEntry

__all__ = [
    "CrashPoint",
    "EventCollector",
    "MemoryDurability",
    "MemoryStore",
    "ScriptEntry",
    "ScriptedModelGateway",
    "SimulatedCrash",
    "crash_hook",
    "raise_at",
]
