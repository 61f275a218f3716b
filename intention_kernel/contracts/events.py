"""``KernelEvent``: the envelope of everything a turn tells the outside world.

``sequence`` orders events within a turn; ``correlation_id`` is the turn's trace id;
``causation_id`` points at the event that caused this one, so parallel steps keep their own
causal branches. Integration events are committed in the outbox with the turn.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from .codec import StoredJsonObject

__all__ = ["EventCategory", "KernelEvent", "StoredEvent"]


class EventCategory(StrEnum):
    """Who an event is for: ``trace`` (debugging), ``audit`` (who decided and what ran) or
    ``integration`` (other systems react to it)."""

    TRACE = "trace"
    AUDIT = "audit"
    INTEGRATION = "integration"


class KernelEvent(BaseModel):
    """One thing a turn tells the outside world, in a fixed envelope.

    ``id`` is unique across turns and attempts (consumers deduplicate by it); ``sequence`` is
    dense in emission order within the turn; ``correlation_id`` is the turn's trace id and
    ``causation_id`` the event that caused this one. Only ``data`` is the event's own payload,
    and only ``data`` may be changed by the host's redactor.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    type: str
    version: int = Field(default=1, ge=1)
    occurred_at: datetime
    thread_id: str
    turn_id: str
    step_id: str | None = None
    sequence: int = Field(ge=0)
    correlation_id: str
    causation_id: str | None = None
    category: EventCategory = EventCategory.INTEGRATION
    data: StoredJsonObject = Field(default_factory=dict)


class StoredEvent(BaseModel):
    """An outbox event as read back from a store, with its delivery state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event: KernelEvent
    position: int = Field(description="store-wide commit order")
    delivered_at: datetime | None = None
    attempts: int = 0
    last_error: str | None = None
    dead: bool = False
    corrupt: str | None = None
    """Why the stored event cannot be read back (``None``: it can). Then ``event`` is a
    placeholder built from the row (type ``ik.unreadable``, empty data); a relay never gets it:
    the store dead-letters it on claim, holding back its own thread only."""
