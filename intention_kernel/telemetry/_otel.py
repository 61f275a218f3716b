"""The one import of ``opentelemetry`` (the ``otel`` extra): ``AVAILABLE`` says whether it is
installed; the other modules reach its API only through this one, and only when it is."""

from __future__ import annotations

from typing import Any

from ..__version__ import __version__

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
    "library_meter",
    "metrics",
    "propagate",
    "trace",
]

SCOPE = "intention_kernel"
"""The instrumentation scope name of every tracer and meter here."""


def library_meter(provider: object | None) -> Any:
    """The library's meter from ``provider`` (a ``MeterProvider``), else from the global one.
    Call only when ``AVAILABLE``."""
    return metrics.get_meter(
        SCOPE,
        __version__,
        meter_provider=provider if isinstance(provider, MeterProvider) else None,
    )
