"""The relay's metrics: delivery lag and dead letters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from ..contracts.events import KernelEvent
from . import _otel


class RelayTelemetry:
    """The relay's metrics: ``ik.relay.delivery.lag`` (from the event's ``occurred_at`` to
    the sink's acknowledgement) and ``ik.relay.dead_letters``."""

    __slots__ = ("_dead", "_lag", "enabled", "relay_id")

    def __init__(self, relay_id: str, *, meter_provider: object | None = None) -> None:
        self.relay_id = relay_id
        self.enabled = _otel.AVAILABLE
        if not _otel.AVAILABLE:
            return
        meter = _otel.library_meter(meter_provider)
        self._lag = meter.create_histogram(
            "ik.relay.delivery.lag",
            unit="s",
            description="From an event's occurred_at to the sink's acknowledgement.",
        )
        self._dead = meter.create_counter(
            "ik.relay.dead_letters", unit="{event}", description="Events dead-lettered."
        )

    def delivered(self, events: Sequence[KernelEvent]) -> None:
        if not self.enabled or not events:
            return
        now = datetime.now(UTC)
        measured: Mapping[str, str] = {"ik.relay.id": self.relay_id}
        for event in events:
            self._lag.record(max(0.0, (now - event.occurred_at).total_seconds()), measured)

    def dead_lettered(self, outcome: str) -> None:
        """One event dead-lettered after a sink outcome (``retry`` past the last attempt, or
        ``reject``)."""
        if self.enabled:
            self._dead.add(1, {"ik.relay.id": self.relay_id, "ik.relay.outcome": outcome})
