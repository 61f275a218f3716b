"""Layer 1: durability adapters. Each backend's driver is imported only by its own module."""

from ._engine import DurabilityEngine, Lease, StoredTurn, TurnScopeImpl
from .factory import open_durability
from .memory import MemoryDurability, MemoryStore

__all__ = [
    "DurabilityEngine",
    "Lease",
    "MemoryDurability",
    "MemoryStore",
    "StoredTurn",
    "TurnScopeImpl",
    "open_durability",
]
