"""Checkpoint compatibility: may this agent continue a thread stored by another definition?

Why refuse by default: a checkpoint written under another contract may hold facts, agenda
items or a planned write whose schemas no longer match. The host opts in explicitly, either by
declaring an old fingerprint compatible or by registering a migration from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..contracts.checkpoint import SCHEMA_VERSION, KernelCheckpoint
from ..contracts.errors import CheckpointIncompatibleError

__all__ = ["Compatibility", "Migration", "admit_checkpoint"]

Migration = Callable[[KernelCheckpoint], KernelCheckpoint]
"""Rewrites a checkpoint stored under an old fingerprint; must keep ``revision``."""


@dataclass(frozen=True, slots=True)
class Compatibility:
    """Which stored checkpoints an agent accepts: its own fingerprint, the declared ones as
    they are, and those with a registered migration."""

    fingerprint: str
    compatible_with: frozenset[str] = frozenset()
    migrations: Mapping[str, Migration] = field(default_factory=dict)


def admit_checkpoint(checkpoint: KernelCheckpoint, compat: Compatibility) -> KernelCheckpoint:
    """Return the checkpoint this agent runs on, or raise ``CheckpointIncompatibleError``."""
    context = {
        "stored_fingerprint": checkpoint.agent_fingerprint,
        "agent_fingerprint": compat.fingerprint,
        "stored_schema_version": checkpoint.schema_version,
        "schema_version": SCHEMA_VERSION,
    }
    if checkpoint.schema_version > SCHEMA_VERSION:
        raise CheckpointIncompatibleError(
            "the checkpoint was written by a newer schema version", context=context
        )
    stored = checkpoint.agent_fingerprint
    if stored == compat.fingerprint or stored in compat.compatible_with:
        return checkpoint
    migration = compat.migrations.get(stored)
    if migration is None:
        raise CheckpointIncompatibleError(
            "the checkpoint was written by another agent definition; declare it compatible "
            "or register a migration",
            context=context,
        )
    migrated = migration(checkpoint)
    if not isinstance(migrated, KernelCheckpoint) or migrated.revision != checkpoint.revision:
        raise CheckpointIncompatibleError(
            "a migration must return a KernelCheckpoint with the same revision", context=context
        )
    if migrated.schema_version > SCHEMA_VERSION:
        raise CheckpointIncompatibleError(
            "a migration produced a newer schema version", context=context
        )
    return migrated
