"""Budget and provider flow-control metrics and span events (``FlowMetrics``).

``ik.budget.tokens`` counts tokens reserved and settled per budget; ``ik.budget.refusals`` the
model calls a used-up budget refused; ``ik.provider.wait`` how long calls waited for a provider
slot (by reason: ``busy``, ``rate``, ``cooling``); ``ik.provider.cooldowns`` the 429/529
answers that cooled a provider down for every process. Each refusal, wait and cool-down is also
an event on the current span (the ``chat`` span's parent, the turn).
"""

from __future__ import annotations

from typing import Any

from . import _otel

__all__ = ["FlowMetrics"]

_WAIT_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class FlowMetrics:
    """Instruments made once per kernel; each record is a no-op without the OpenTelemetry
    API."""

    def __init__(self, meter_provider: object | None = None) -> None:
        self._on = _otel.AVAILABLE
        if not self._on:
            return
        meter = _otel.library_meter(meter_provider)
        self._tokens = meter.create_counter(
            "ik.budget.tokens", unit="{token}", description="Tokens reserved and settled."
        )
        self._refusals = meter.create_counter(
            "ik.budget.refusals", unit="{call}", description="Model calls a budget refused."
        )
        self._wait = meter.create_histogram(
            "ik.provider.wait",
            unit="s",
            description="Time a model call waited for a provider slot.",
            explicit_bucket_boundaries_advisory=_WAIT_BOUNDS,
        )
        self._cooldowns = meter.create_counter(
            "ik.provider.cooldowns",
            unit="{answer}",
            description="429/529 answers that cooled a provider down for every process.",
        )

    def reserved(self, budget: str, tokens: int) -> None:
        if self._on:
            self._tokens.add(tokens, {"ik.budget.name": budget, "ik.budget.kind": "reserved"})

    def settled(self, budget: str, tokens: int) -> None:
        if self._on:
            self._tokens.add(tokens, {"ik.budget.name": budget, "ik.budget.kind": "used"})

    def refused(self, budget: str, key_hash: str) -> None:
        if self._on:
            self._refusals.add(1, {"ik.budget.name": budget})
            _event("ik.budget.exceeded", {"ik.budget.name": budget, "ik.budget.key": key_hash})

    def waited(self, provider: str, reason: str, seconds: float) -> None:
        if self._on:
            attributes = {"gen_ai.provider.name": provider, "ik.provider.wait.reason": reason}
            self._wait.record(seconds, attributes)
            _event("ik.provider.waited", {**attributes, "ik.provider.wait.seconds": seconds})

    def cooled(self, provider: str, seconds: float) -> None:
        if self._on:
            self._cooldowns.add(1, {"gen_ai.provider.name": provider})
            _event(
                "ik.provider.cooldown",
                {"gen_ai.provider.name": provider, "ik.provider.cooldown.seconds": seconds},
            )


def _event(name: str, attributes: dict[str, Any]) -> None:
    span = _otel.trace.get_current_span()
    if span.is_recording():
        span.add_event(name, attributes)
