"""The one import of ``opentelemetry`` (the ``otel`` extra): ``AVAILABLE`` says whether it is
installed; the other modules reach its API only through this one, and only when it is."""

from __future__ import annotations

try:
    from opentelemetry import context, metrics, propagate, trace
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
    from opentelemetry.trace import Span, SpanKind, StatusCode, TracerProvider

    AVAILABLE = True
except ImportError:  # pragma: no cover - the otel extra is not installed
    AVAILABLE = False

__all__ = [
    "AVAILABLE",
    "SCOPE",
    "CallbackOptions",
    "MeterProvider",
    "Observation",
    "Span",
    "SpanKind",
    "StatusCode",
    "TracerProvider",
    "context",
    "metrics",
    "propagate",
    "trace",
]

SCOPE = "intention_kernel"
"""The instrumentation scope name of every tracer and meter here."""
