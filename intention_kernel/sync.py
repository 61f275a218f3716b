"""Blocking entry points for hosts without an event loop (WSGI apps, scripts, worker threads).

``open_durability_sync(url)`` opens a store on a background event loop (a ``Portal``) and
returns a ``SyncDurability`` to pass to ``Kernel(durability=...)``; the compiled agent's
``run_sync`` and ``stream_sync`` then run each turn on that loop and block the calling thread
until it ended. Any number of threads may call them at once. Called from inside a running
event loop they raise ``UsageError``: there, await ``run`` and ``stream`` instead.
"""

from __future__ import annotations

from typing import Any

from .durability.factory import open_durability
from .kernel._portal import Portal, SyncDurability, default_portal

__all__ = ["Portal", "SyncDurability", "open_durability_sync"]


def open_durability_sync(
    url: str, *, portal: Portal | None = None, **options: Any
) -> SyncDurability:
    """``open_durability(url, **options)`` on ``portal``'s loop (default: the shared one).

    Close it with ``close_sync()`` (or use it as a ``with`` block). The store is bound to that
    loop: reach it from other threads through ``run_sync``, ``stream_sync`` or ``call``.
    """
    home = portal if portal is not None else default_portal()
    store = home.call(lambda: open_durability(url, **options), what="open_durability_sync")
    return SyncDurability(store, home)
