"""``KernelCheckpoint``: the canonical runtime state of one thread after a committed turn.

It holds only what the runtime needs to continue (spec, "Checkpoint contents"): bounded recent
messages, versioned facts with evidence lineage, the pending agenda, the active interaction,
the effect receipts that matter now, the agent fingerprint and the schema revision. Business
workflow state belongs in facts, never in new fields here. The JSON form round-trips exactly.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .codec import StoredJson, StoredJsonObject
from .receipts import EffectReceipt

__all__ = [
    "SCHEMA_VERSION",
    "AgendaItem",
    "AgendaStatus",
    "Evidence",
    "FactRecord",
    "Interaction",
    "KernelCheckpoint",
    "Message",
]

SCHEMA_VERSION = 1
"""The checkpoint schema this code writes; newer stored versions are refused."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Message(BaseModel):
    """One message of the thread as the checkpoint keeps it (the newest, bounded)."""

    model_config = _FROZEN

    role: Literal["user", "assistant"]
    text: str
    turn_id: str
    at: datetime | None = None


class Evidence(BaseModel):
    """Where a fact came from: a capability step, and optionally a receipt or source ref."""

    model_config = _FROZEN

    id: str
    capability_id: str
    turn_id: str
    step_id: str | None = None
    receipt_id: str | None = None
    source: str | None = None


class FactRecord(BaseModel):
    """One versioned fact. ``type`` and ``version`` name its contract (``order@1``);
    ``revision`` counts replacements of this fact; ``derived_from`` is its lineage."""

    model_config = _FROZEN

    id: str
    type: str
    version: int = Field(ge=1)
    revision: int = Field(default=1, ge=1)
    value: StoredJson
    evidence: list[Evidence] = Field(default_factory=list)
    derived_from: list[str] = Field(default_factory=list)
    turn_id: str


class AgendaStatus(StrEnum):
    """What a pending agenda item waits for. Stored as the plain string value."""

    AWAITING_CONFIRMATION = "awaiting_confirmation"
    """The kernel asks for consent (``confirmation="required"`` or a policy) before it runs."""
    NEEDS_CONFIRMATION = "needs_confirmation"
    """The capability asked for consent itself; an accepting answer resumes it."""
    NEEDS_INPUT = "needs_input"
    """The capability asked the user for more; planning it again answers it."""
    WAITING_FOR_FACT = "waiting_for_fact"
    """A fact it requires is missing; it resumes once the fact exists or changes."""
    AWAITING_EXTERNAL = "awaiting_external"
    """Parked by its capability until the outside world completes it (or its timeout)."""


class AgendaItem(BaseModel):
    """Work planned but not finished (e.g. a write awaiting confirmation or a dependency)."""

    model_config = _FROZEN

    id: str
    capability_id: str
    capability_version: str | None = None
    input: StoredJson = None
    status: AgendaStatus
    reason: str | None = None
    created_turn_id: str
    data: StoredJsonObject = Field(default_factory=dict)


class Interaction(BaseModel):
    """The question the thread is waiting on (confirmation, missing input, ...)."""

    model_config = _FROZEN

    id: str
    kind: str
    prompt: str
    options: list[str] = Field(default_factory=list)
    agenda_item_id: str | None = None
    turn_id: str
    data: StoredJsonObject = Field(default_factory=dict)


class KernelCheckpoint(BaseModel):
    """State of a thread after a committed turn. ``revision`` grows by exactly one per turn."""

    model_config = _FROZEN

    schema_version: int = Field(default=SCHEMA_VERSION, ge=1)
    revision: int = Field(ge=1)
    agent_fingerprint: str
    messages: list[Message] = Field(default_factory=list)
    omitted_messages: int = Field(default=0, ge=0)
    facts: list[FactRecord] = Field(default_factory=list)
    agenda: list[AgendaItem] = Field(default_factory=list)
    interaction: Interaction | None = None
    receipts: list[EffectReceipt] = Field(default_factory=list)
    metadata: StoredJsonObject = Field(
        default_factory=dict, description="kernel-private state, e.g. a planned operation"
    )
