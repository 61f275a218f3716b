"""Public test helpers. ``MemoryDurability`` is the in-process, test-only adapter.

``ScriptedModelGateway`` answers model requests from a script; ``EventCollector`` keeps the
kernel's released events. The adapter conformance suite lives in
``intention_kernel.testing.conformance`` (it needs the ``testing`` extra: pytest and hypothesis).
"""

from ..durability.crashpoints import CrashPoint, SimulatedCrash, crash_hook, raise_at
from ..durability.memory import MemoryDurability, MemoryStore
from .events import EventCollector
from .gateway import ScriptedModelGateway, ScriptEntry

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
