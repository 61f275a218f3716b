"""Layer 1: the stores. Each backend's driver is imported only by its own subpackage.

``open_durability(url)`` opens a store by URL. Adapter authors subclass
``intention_kernel.durability.engine.DurabilityEngine`` and implement its ``storage_*`` hooks.
"""

from .engine import DurabilityEngine, Lease, OpenedTurn, Reconciliation, StoredTurn, TurnCommit
from .factory import open_durability
from .memory import MemoryDurability, MemoryStore

__all__ = [
    "DurabilityEngine",
    "Lease",
    "MemoryDurability",
    "MemoryStore",
    "OpenedTurn",
    "Reconciliation",
    "StoredTurn",
    "TurnCommit",
    "open_durability",
]
