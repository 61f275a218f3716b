"""The in-process store (**test-only**): the whole contract in one process, lost with it."""

from ._adapter import MemoryDurability, MemoryStore

__all__ = ["MemoryDurability", "MemoryStore"]
