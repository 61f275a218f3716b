"""The deployment gate: would this agent definition refuse any stored checkpoint?

Why scan every thread: a new agent definition refuses checkpoints it was not declared
compatible with, so a deploy that strands live threads should fail in CI, not at the next turn.
Migrations run in memory only; nothing is written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..contracts.durability import DurabilityStore
from ..contracts.errors import CheckpointCorruptError, CheckpointIncompatibleError
from ..contracts.inspect import StoreInspector
from ..kernel import Compatibility, admit_checkpoint

__all__ = ["CompatReport", "RefusedThread", "compat_report"]

_PAGE = 500


@dataclass(frozen=True, slots=True)
class RefusedThread:
    """A thread the agent would not load: corrupt (no fingerprint) or incompatible."""

    thread_id: str
    reason: str
    fingerprint: str | None = None
    schema_version: int | None = None

    def as_dict(self) -> dict[str, Any]:
        shaped: dict[str, Any] = {"thread_id": self.thread_id}
        if self.fingerprint is not None:
            shaped["fingerprint"] = self.fingerprint
            shaped["schema_version"] = self.schema_version
        shaped["reason"] = self.reason
        return shaped


@dataclass(frozen=True, slots=True)
class CompatReport:
    agent_fingerprint: str
    checkpoints: int
    schema_versions: dict[str, int] = field(default_factory=dict)
    fingerprints: dict[str, int] = field(default_factory=dict)
    refused: list[RefusedThread] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refused

    def as_dict(self) -> dict[str, Any]:
        return {
            "agent_fingerprint": self.agent_fingerprint,
            "checkpoints": self.checkpoints,
            "schema_versions": dict(self.schema_versions),
            "fingerprints": dict(self.fingerprints),
            "refused": [r.as_dict() for r in self.refused],
            "ok": self.ok,
        }


async def compat_report(
    store: DurabilityStore,
    inspector: StoreInspector,
    compat: Compatibility,
    *,
    advance: Callable[[], None] | None = None,
    include: Callable[[str], Awaitable[bool]] | None = None,
) -> CompatReport:
    """Load every stored head checkpoint under ``compat``; ``advance`` is called per thread.

    ``include(thread_id)``, when given, leaves out the threads it refuses: they are neither
    counted nor listed (the inspector asks ``authorize`` so a report shows only what the
    principal may read).
    """
    schemas: Counter[int] = Counter()
    fingerprints: Counter[str] = Counter()
    refused: list[RefusedThread] = []
    scanned = 0
    after: str | None = None
    while True:
        page = await inspector.list_threads(after=after, limit=_PAGE)
        for summary in page:
            if advance is not None:
                advance()
            if include is not None and not await include(summary.thread_id):
                continue
            try:
                checkpoint = await store.load_checkpoint(summary.thread_id)
            except CheckpointCorruptError as exc:
                refused.append(RefusedThread(summary.thread_id, exc.message))
                continue
            if checkpoint is None:
                continue
            scanned += 1
            schemas[checkpoint.schema_version] += 1
            fingerprints[checkpoint.agent_fingerprint] += 1
            try:
                admit_checkpoint(checkpoint, compat)
            except CheckpointIncompatibleError as exc:
                refused.append(
                    RefusedThread(
                        summary.thread_id,
                        exc.message,
                        checkpoint.agent_fingerprint,
                        checkpoint.schema_version,
                    )
                )
        if len(page) < _PAGE:
            break
        after = page[-1].thread_id
    return CompatReport(
        compat.fingerprint,
        scanned,
        {str(k): v for k, v in sorted(schemas.items())},
        dict(sorted(fingerprints.items())),
        refused,
    )
