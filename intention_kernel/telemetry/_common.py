"""What every part of the telemetry shares: attribute values, the names the conventions
give, and the no-op handle returned when nothing is recorded."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..contracts.errors import ModelGatewayError
from ..contracts.events import KernelEvent
from ..contracts.inbox import InboxRequest
from ..contracts.receipts import EffectReceipt

Attributes = dict[str, Any]
Redactor = Callable[[KernelEvent], KernelEvent]


def key_hash(key: str) -> str:
    """What a span shows of an idempotency key: enough to match two spans, never the key."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def db_system(store: object) -> str | None:
    """The ``db.system.name`` of a store, as its class names it (``telemetry_system``: the
    conventions' ``sqlite``, ``postgresql``...; the kernel sees only the protocol). A store
    that names none, or not as text, gets none."""
    named = getattr(type(store), "telemetry_system", None)
    return named if isinstance(named, str) and named else None


_GEN_AI_PROVIDERS = {
    "google": "gcp.gemini",
    "google-gla": "gcp.gemini",
    "gemini": "gcp.gemini",
    "google-cloud": "gcp.vertex_ai",
    "google-vertex": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "bedrock": "aws.bedrock",
    "bedrock-mantle": "aws.bedrock",
    "xai": "x_ai",
    "grok": "x_ai",
    "azure": "azure.ai.openai",
}
"""Provider names as gateways give them (Pydantic AI's, the model-string prefixes) that the
GenAI conventions know by another ``gen_ai.provider.name``; the others are kept as given
(``openai``, ``anthropic``, ``groq``, ``cohere``, ``deepseek`` are already the conventions')."""


def _gen_ai_provider(name: str) -> str:
    """The conventions' well-known ``gen_ai.provider.name`` for a gateway's provider name."""
    return _GEN_AI_PROVIDERS.get(name, name)


def _error_type(exc: BaseException) -> str:
    """``error.type``: the HTTP status a provider answered, the failure's kind when a gateway
    classified it without one (``timeout``, ``connection``...), else the exception's fully
    qualified class name (the conventions' low-cardinality choices)."""
    if isinstance(exc, ModelGatewayError):
        context = exc.context
        status = context.get("status")
        if isinstance(status, int) and not isinstance(status, bool):
            return str(status)
        kind = context.get("kind")
        if isinstance(kind, str) and kind:
            return kind
    kind_of = type(exc)
    module = kind_of.__module__
    return kind_of.__qualname__ if module == "builtins" else f"{module}.{kind_of.__qualname__}"


def _clean(value: object) -> Any:
    """An attribute value OpenTelemetry accepts, or ``None`` (dropped)."""
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


class _Null:
    """Every handle when nothing is recorded: each method does nothing."""

    __slots__ = ()
    traceparent: str | None = None

    def __enter__(self) -> _Null:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def acquired(self, since: float) -> None:
        return None

    def outcome(self, replayed: bool) -> None:
        return None

    def raised(self, exc: BaseException) -> None:
        return None

    def planned(
        self, steps: int, held: Iterable[tuple[str, str]], clarifications: int, round: int = 1
    ) -> None:
        return None

    def answered(
        self,
        *,
        provider: str | None,
        model: str | None,
        finish_reason: str | None,
        input_tokens: int,
        output_tokens: int,
    ) -> None:
        return None

    def ended(self, status: str) -> None:
        return None

    def settled(self, status: str, receipt: EffectReceipt | None, replayed: bool | None) -> None:
        return None

    def claimed(self, request: InboxRequest) -> None:
        return None

    def done(self, request: InboxRequest) -> None:
        return None

    def released(
        self, request: InboxRequest, released: InboxRequest | None, error_code: str | None
    ) -> None:
        return None


NULL = _Null()


def _cleaned(data: Mapping[str, object]) -> Attributes:
    return {k: v for k, v in ((k, _clean(v)) for k, v in data.items()) if v is not None}
