"""Deprecated import path (kept for one release): the store is ``store.DurableStore``.

``DurabilityEngine`` is an alias of ``DurableStore`` for annotations. A store is no longer a
subclass implementing ``storage_*`` hooks: it is a ``DurableStore`` over role objects (see
``storage.py`` and ``docs/conformance.md``). The data types moved to ``storage.py``.
"""

from __future__ import annotations

from ._scope import TurnScopeImpl
from .storage import Lease, OpenedTurn, Reconciliation, StoredTurn, ThreadQuery, TurnCommit
from .store import DurableStore

__all__ = [
    "DurabilityEngine",
    "Lease",
    "OpenedTurn",
    "Reconciliation",
    "StoredTurn",
    "ThreadQuery",
    "TurnCommit",
    "TurnScopeImpl",
]

DurabilityEngine = DurableStore
"""Deprecated alias of ``DurableStore`` (for annotations; one release)."""
