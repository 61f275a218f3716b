"""Layer 1: the stores. Each backend's driver is imported only by its own subpackage.

``open_durability(url)`` opens a store by URL. A store is a ``DurableStore`` composed of
storage roles (``TurnStorage`` required; ``HistoryStorage``, ``OutboxStorage`` and
``InspectionStorage`` optional; see ``storage.py`` and ``docs/conformance.md``).
"""

from .engine import DurabilityEngine
from .factory import open_durability
from .memory import MemoryDurability, MemoryStore
from .storage import (
    HistoryStorage,
    InspectionStorage,
    Lease,
    OpenedTurn,
    OutboxStorage,
    Reconciliation,
    StoredTurn,
    TurnCommit,
    TurnStorage,
)
from .store import DurableStore

__all__ = [
    "DurabilityEngine",
    "DurableStore",
    "HistoryStorage",
    "InspectionStorage",
    "Lease",
    "MemoryDurability",
    "MemoryStore",
    "OpenedTurn",
    "OutboxStorage",
    "Reconciliation",
    "StoredTurn",
    "TurnCommit",
    "TurnStorage",
    "open_durability",
]
