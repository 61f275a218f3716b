"""OpenTelemetry spans and metrics for turns, model calls, steps, effects and the relay.

Why a package: ``_otel`` is the only module that imports ``opentelemetry`` (the ``otel``
extra, the API only; the host brings the SDK and its exporter); the turn and its metrics
(``_turns``), the spans inside a turn (``_spans``), the receipts gauge (``_receipts``), the
turn inbox's metrics (``_inbox``) and the relay's metrics (``_relay``) each have their own
module. Without the package every helper is a shared no-op; with the API but no SDK
configured, a turn checks the two global providers and does nothing else. With an SDK whose
sampler drops the turn, the turn's span is not recording and no child span or further
attribute is built (its metrics are still recorded).

Cost (``bench/telemetry_overhead.py``): almost all of it is the SDK's own span and metric
work; here each span gets its attributes at its start and those known later in one call at
its end, metric attribute sets are built once per kernel, and the redactor's envelope once
per turn.

What is emitted (see ``docs/observability.md``):

* spans ``ik.turn``, ``ik.plan``, ``chat {model}`` (the OpenTelemetry
  GenAI conventions, ``gen_ai.*``), ``ik.step {capability}`` and ``ik.effect {capability}``;
* metrics ``ik.turn.duration``, ``ik.turn.replays``, ``ik.lease.wait``, ``ik.effects``,
  ``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage`` (with the GenAI
  conventions' bucket boundaries), ``ik.receipts.uncertain`` (``UncertainReceipts``),
  ``ik.inbox.requests`` and ``ik.inbox.oldest_pending.age`` (``InboxBacklog``),
  ``ik.inbox.wait``, ``ik.inbox.attempts`` and ``ik.inbox.outcomes`` (recorded by workers),
  ``ik.relay.delivery.lag`` and ``ik.relay.dead_letters`` (``RelayTelemetry``);
* a caller's W3C trace context continued (``continued_trace``, for the HTTP service).

Span attributes never carry message text, provider payloads or raw idempotency keys (a key is
a sha256 prefix); those that come from the host pass the host's redactor first.
"""

from __future__ import annotations

from ._common import NULL as NULL  # the shared no-op handle
from ._common import db_system, key_hash
from ._flow import FlowMetrics
from ._inbox import InboxBacklog
from ._otel import AVAILABLE
from ._otel import SCOPE as SCOPE
from ._propagation import continued_trace, current_traceparent
from ._receipts import ReceiptLister as ReceiptLister
from ._receipts import UncertainReceipts
from ._relay import RelayTelemetry
from ._spans import effect_span, model_span, plan_span, step_span
from ._turns import Telemetry

__all__ = [
    "AVAILABLE",
    "FlowMetrics",
    "InboxBacklog",
    "RelayTelemetry",
    "Telemetry",
    "UncertainReceipts",
    "continued_trace",
    "current_traceparent",
    "db_system",
    "effect_span",
    "key_hash",
    "model_span",
    "plan_span",
    "step_span",
]
