"""A caller's W3C trace context continued (for the HTTP service and submitted turns)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from . import _otel


@contextlib.contextmanager
def continued_trace(headers: Mapping[str, str]) -> Iterator[None]:
    """The caller's trace current while the block runs: ``headers`` (a request's, read
    case-insensitively) carry it as W3C ``traceparent``, with ``tracestate`` (the global
    propagator's formats; by default W3C trace context and baggage). A turn started in the block,
    or a task created in it, is then a child of the caller's span. Without the package or a
    ``traceparent``, nothing changes; a malformed one is ignored (the turn starts a new trace).
    A span already current (the host's ASGI instrumentation continued the trace in its server
    span) stays the parent."""
    if (
        not _otel.AVAILABLE
        or headers.get("traceparent") is None
        or _otel.trace.get_current_span().get_span_context().is_valid
    ):
        yield
        return
    token = _otel.context.attach(_otel.propagate.extract(headers))
    try:
        yield
    finally:
        _otel.context.detach(token)


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the span current here, or ``None`` (no package, no span):
    kept with a submitted turn, so the worker that runs it continues the submitter's trace."""
    if not _otel.AVAILABLE:
        return None
    context = _otel.trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
