"""The per-turn event recorder: envelope, ordering, causation and redaction.

Why one recorder per turn: ``sequence`` must be dense within a turn, every event correlates to
the turn's trace id, and each event names the event that caused it, so parallel steps form
separate causal branches under the plan event. The host redactor runs on each event before it
can leave the kernel (outbox and sinks alike).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import JsonValue

from ..contracts.errors import ConfigurationError, InvalidInputError
from ..contracts.events import EventCategory, KernelEvent, check_event_type
from ..contracts.sinks import EventSink, OutcomeKind

__all__ = ["EventRecorder", "Redactor", "build_event", "publish"]

logger = logging.getLogger("intention_kernel.events")

Redactor = Callable[[KernelEvent], KernelEvent]
"""The host's redactor: returns the event with its ``data`` cleaned (the envelope is kept)."""

_FIELDS = frozenset(KernelEvent.model_fields)


def _now() -> datetime:
    return datetime.now(UTC)


def _validated(fields: dict[str, Any]) -> KernelEvent:
    return KernelEvent(**fields)


def _prebuilt(fields: dict[str, Any]) -> KernelEvent:
    """An event from fields the kernel built itself, without a second validation pass.

    Why: a turn emits about ten events, and pydantic's ``JsonValue`` check of ``data`` was a
    large share of the kernel's time; the store's codec checks every outbox event's JSON at
    commit anyway (a bad value fails the whole turn, nothing written).
    """
    event = object.__new__(KernelEvent)
    object.__setattr__(event, "__dict__", fields)
    object.__setattr__(event, "__pydantic_fields_set__", set(_FIELDS))
    object.__setattr__(event, "__pydantic_extra__", None)
    object.__setattr__(event, "__pydantic_private__", None)
    return event


def _prebuilt_is_faithful() -> bool:
    """Use the fast path only if it yields exactly what validation yields on this pydantic."""
    sample: dict[str, Any] = {
        "id": "evt_probe.0",
        "type": "probe",
        "version": 1,
        "occurred_at": datetime(2026, 1, 1, tzinfo=UTC),
        "thread_id": "t",
        "turn_id": "u",
        "step_id": None,
        "sequence": 0,
        "correlation_id": "c",
        "causation_id": None,
        "category": EventCategory.TRACE,
        "data": {"k": [1, "x", None]},
        "traceparent": None,
    }
    try:
        fast, slow = _prebuilt(dict(sample)), _validated(dict(sample))
        copied = fast.model_copy(update={"data": {}})
        return (
            fast == slow
            and fast.model_dump_json() == slow.model_dump_json()
            and copied.data == {}
            and set(sample) == _FIELDS
        )
    except Exception:
        return False


build_event: Callable[[dict[str, Any]], KernelEvent] = (
    _prebuilt if _prebuilt_is_faithful() else _validated
)


class EventRecorder:
    __slots__ = ("_clock", "_events", "_redact", "thread_id", "trace_id", "traceparent", "turn_id")

    # Event ids are the trace id (time-ordered, 64 random bits, unique per attempt) plus the
    # sequence: unique across turns and attempts without drawing randomness per event.

    def __init__(
        self,
        thread_id: str,
        turn_id: str,
        trace_id: str,
        redact: Redactor | None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.turn_id = turn_id
        self.trace_id = trace_id
        self._redact = redact
        self._clock = clock or _now
        self._events: list[KernelEvent] = []
        self.traceparent: str | None = None
        """The turn span's W3C ``traceparent``, stamped on every event when it was traced."""

    def emit(
        self,
        type: str,
        data: dict[str, JsonValue] | None = None,
        *,
        cause: KernelEvent | None = None,
        step_id: str | None = None,
        category: EventCategory = EventCategory.TRACE,
    ) -> KernelEvent:
        """Record one event (sequence assigned here, in emission order) and return it."""
        sequence = len(self._events)
        check_event_type(type)
        if data is not None and not isinstance(data, dict):
            raise InvalidInputError("an event's data must be a dict", context={"field": "data"})
        event = build_event(
            {
                "id": f"evt_{self.trace_id}.{sequence}",
                "type": type,
                "version": 1,
                "occurred_at": self._clock(),
                "thread_id": self.thread_id,
                "turn_id": self.turn_id,
                "step_id": step_id,
                "sequence": sequence,
                "correlation_id": self.trace_id,
                "causation_id": None if cause is None else cause.id,
                "category": category,
                "data": data if data is not None else {},
                "traceparent": self.traceparent,
            }
        )
        self._events.append(event)
        return event

    def released(self) -> list[KernelEvent]:
        """The events as they may leave the kernel: redacted, envelope fields untouched."""
        if self._redact is None:
            return list(self._events)
        out: list[KernelEvent] = []
        for event in self._events:
            redacted = self._redact(event)
            if not isinstance(redacted, KernelEvent):
                raise ConfigurationError(
                    "the redactor must return a KernelEvent", context={"event_type": event.type}
                )
            # The envelope is the kernel's, not the redactor's: only ``data`` may change.
            out.append(event.model_copy(update={"data": dict(redacted.data)}))
        return out


async def publish(sinks: Sequence[EventSink], events: list[KernelEvent]) -> None:
    """Hand the turn's released events to the in-process sinks, best effort.

    One event per call keeps the sink contract (at most one event of a thread per publish,
    so a sink may send a call's events concurrently). The turn is committed: a failing live
    sink must not turn it into an error, but it is logged (sink and event type only, never
    the payload). A sink that raises gets none of the turn's later events; the outbox
    still holds them all for the relay.
    """
    for sink in sinks:
        name = type(sink).__qualname__
        for index, event in enumerate(events):
            try:
                outcomes = await sink.publish([event])
                refused = [o for o in outcomes or () if o.kind is not OutcomeKind.OK]
            except Exception as exc:
                logger.warning(
                    "event sink %s raised %s on %s; %d later event(s) of this turn skipped",
                    name,
                    type(exc).__name__,
                    event.type,
                    len(events) - index - 1,
                )
                break
            for outcome in refused:
                logger.warning(
                    "event sink %s did not accept %s: %s (%s)",
                    name,
                    event.type,
                    outcome.kind,
                    outcome.code,
                )
