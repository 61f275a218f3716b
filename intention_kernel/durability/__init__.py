"""Layer 1: the stores. Each backend's driver is imported only by its own subpackage.

``open_durability(url)`` opens a store by URL. A store is a ``DurableStore`` composed of
storage roles (``TurnStorage`` required; ``HistoryStorage``, ``OutboxStorage``,
``InspectionStorage`` and ``InboxStorage`` optional; see ``storage.py``, ``_inbox_role.py`` and
``docs/conformance.md``). ``store.inbox`` is the turn inbox (``Inbox``, ``docs/inbox.md``).
"""

from ._inbox import Inbox
from ._inbox_role import InboxStorage, NewRequest, Submitted
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
    "Inbox",
    "InboxStorage",
    "InspectionStorage",
    "Lease",
    "MemoryDurability",
    "MemoryStore",
    "NewRequest",
    "OpenedTurn",
    "OutboxStorage",
    "Reconciliation",
    "StoredTurn",
    "Submitted",
    "TurnCommit",
    "TurnStorage",
    "open_durability",
]
