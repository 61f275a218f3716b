"""``KernelEvent``: the envelope of everything a turn tells the outside world.

``sequence`` orders events within a turn; ``correlation_id`` is the turn's trace id;
``causation_id`` points at the event that caused this one, so parallel steps keep their own
causal branches. Integration events are committed in the outbox with the turn.
"""

from __future__ import annotations

import inspect
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from .codec import StoredJsonObject
from .errors import InvalidInputError

__all__ = [
    "MAX_EVENT_TYPE_LENGTH",
    "TRACEPARENT_PATTERN",
    "EventCategory",
    "KernelEvent",
    "StoredEvent",
    "check_event_type",
]

MAX_EVENT_TYPE_LENGTH = 200
"""The longest event ``type`` (consumers route on it: a subject, a stream field, a header)."""

TRACEPARENT_PATTERN = r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
"""A W3C Trace Context ``traceparent`` (version, trace id, parent id, flags)."""

_EXCLUDE_IF = "exclude_if" in inspect.signature(Field).parameters
"""pydantic >= 2.11 leaves a field out by value at almost no cost; older ones need a
serializer around the whole model (a Python call per event)."""


def _absent(value: object) -> bool:
    return value is None


class EventCategory(StrEnum):
    """Who an event is for: ``trace`` (debugging), ``audit`` (who decided and what ran) or
    ``integration`` (other systems react to it)."""

    TRACE = "trace"
    AUDIT = "audit"
    INTEGRATION = "integration"


class KernelEvent(BaseModel):
    """One thing a turn tells the outside world, in a fixed envelope.

    ``id`` is unique across turns and attempts (consumers deduplicate by it); ``sequence`` is
    dense in emission order within the turn (an outbox that leaves a category out, see
    ``Kernel(outbox_categories=...)``, shows gaps); ``correlation_id`` is the turn's trace id and
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
    # ``traceparent``: the W3C Trace Context of the turn's span when it was traced
    # (OpenTelemetry), so the relay can send it on and a consumer's span joins the turn's
    # trace. Left out of the JSON when absent: events without it are stored exactly as before.
    if _EXCLUDE_IF:
        traceparent: str | None = Field(
            default=None, pattern=TRACEPARENT_PATTERN, exclude_if=_absent
        )
    else:  # pragma: no cover - pydantic before 2.11
        traceparent: str | None = Field(default=None, pattern=TRACEPARENT_PATTERN)  # type: ignore[no-redef]

        @model_serializer(mode="wrap")
        def _without_absent_traceparent(self, handler: SerializerFunctionWrapHandler) -> Any:
            shaped = handler(self)
            if self.traceparent is None and isinstance(shaped, dict):
                shaped.pop("traceparent", None)
            return shaped


class StoredEvent(BaseModel):
    """An outbox event as read back from a store, with its delivery state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event: KernelEvent
    position: int = Field(description="its place in the store (walking order across threads)")
    revision: int = Field(
        default=0, ge=0, description="the thread revision its turn committed (0: not recorded)"
    )
    delivered_at: datetime | None = None
    attempts: int = 0
    last_error: str | None = None
    dead: bool = False
    corrupt: str | None = None
    """Why the stored event cannot be read back (``None``: it can). Then ``event`` is a
    placeholder built from the row (type ``ik.unreadable``, empty data); a relay never gets it:
    the store dead-letters it on claim, holding back its own thread only."""

    @property
    def thread_order(self) -> tuple[int, int]:
        """Its place within its thread: the turn's revision, then the event's sequence."""
        return (self.revision, self.event.sequence)


def check_event_type(value: object) -> str:
    """``value`` if it is an event type: text, not blank, at most ``MAX_EVENT_TYPE_LENGTH``
    characters. Consumers route on the type, so an event without one could reach no one;
    refused (``InvalidInputError``, ``context["field"] == "type"``) where events are made."""
    if not isinstance(value, str):
        reason = "not_a_string"
    elif not value.strip():
        reason = "blank"
    elif len(value) > MAX_EVENT_TYPE_LENGTH:
        reason = "too_long"
    else:
        return value
    raise InvalidInputError(
        f"an event type must be non-blank text of at most {MAX_EVENT_TYPE_LENGTH} characters",
        context={"field": "type", "reason": reason},
    )
