"""One call to a model gateway, with the kernel's checks and records around it.

Why in one place: every model request goes to the model of its task (``routing``), carries only
what the agent's fact types let a model see (withheld values scrubbed from the whole input),
is recorded as ``model.invoked`` (a hash and the sizes of the prompt, never its text) and
``model.completed`` (finish reason, tokens, duration by the kernel's clock), and is counted in
the turn's usage. A refusal or a content-filter stop comes back as its own outcome: neither a
retry nor a repair would change it, so the stages answer safely instead. A stage that shows
the answer while it is written passes ``on_delta``: a streaming gateway is then asked with
``stream``, and only its final response is checked and used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import TypeGuard

from pydantic import JsonValue

from ...contracts.errors import ErrorCode, KernelError, ModelGatewayError
from ...contracts.gateway import (
    ModelGateway,
    ModelOutputDelta,
    ModelRefusal,
    ModelRequest,
    ModelResponse,
    StreamingModelGateway,
)
from ...telemetry import model_span
from .._routing import provider_of
from .state import TurnState

__all__ = ["REFUSED_REASONS", "Reply", "ask"]

REFUSED_REASONS = ("refusal", "content_filter")
"""Finish reasons that mean the provider declined to answer."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A model's answer: untrusted ``output``, or the provider's ``refusal`` (then no output)."""

    output: JsonValue
    refusal: ModelRefusal | None = None


def _tokens(usage: object, name: str) -> int:
    value = usage.get(name) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _refusal(response: ModelResponse) -> ModelRefusal | None:
    if isinstance(response.refusal, ModelRefusal):
        return response.refusal
    if response.finish_reason in REFUSED_REASONS:
        kind = "content_filter" if response.finish_reason == "content_filter" else "refusal"
        return ModelRefusal(kind=kind)
    return None


async def ask(
    state: TurnState,
    task: str,
    payload: dict[str, JsonValue],
    schema: dict[str, JsonValue],
    *,
    on_delta: Callable[[ModelOutputDelta], None] | None = None,
) -> Reply:
    """Send one request to the task's model; a gateway that answers something other than a
    ``ModelResponse`` is treated as a provider failure (nothing committed)."""
    runtime = state.runtime
    route = runtime.routes[task]
    if runtime.facts.active:
        known = list(state.facts.values())
        if state.reduction is not None:
            known.extend(state.reduction.facts)
        secrets = runtime.facts.secrets(known)
        if secrets:
            scrubbed = secrets.scrub(payload)
            assert isinstance(scrubbed, dict)
            payload = scrubbed
    system = runtime.definition.instructions
    # Built by the kernel from JSON-safe parts, so validation would only cost time.
    request = ModelRequest.model_construct(
        task=task, model=route.model, system=system, input=payload, output_schema=schema
    )
    catalog = runtime.catalog
    # The input's compact JSON, assembled from its parts: the catalog's parts are encoded once.
    sent = b"{%b}" % b",".join(
        b"%b:%b" % (encode_basestring(key).encode(), catalog.encoded(value))
        for key, value in payload.items()
    )
    shape, told = catalog.encoded(schema), system.encode(errors="replace")
    digest = hashlib.sha256(b"\0".join((task.encode(), told, sent, shape))).hexdigest()
    provider = provider_of(route.gateway)
    size = len(told) + len(sent) + len(shape)
    invoked = state.recorder.emit(
        "model.invoked",
        {
            "task": task,
            "provider": provider,
            "model": route.label,
            "prompt_sha256": digest,
            "prompt_bytes": size,
            "system_bytes": len(told),
            "input_bytes": len(sent),
            "schema_bytes": len(shape),
        },
        cause=state.start_event,
    )
    gate = runtime.flow
    async with nullcontext(None) if gate is None else gate.call(state, route, size) as ticket:
        state.meter.calls += 1
        started = runtime.clock()
        try:
            # The "chat {model}" span is current while the gateway runs: an instrumented HTTP
            # client's span nests under it.
            with model_span(task, provider, route.model or route.label) as call:
                response = await _answer(route.gateway, request, on_delta)
                if not isinstance(response, ModelResponse):
                    raise ModelGatewayError(
                        "the model gateway returned something other than a ModelResponse",
                        code=ErrorCode.MODEL_OUTPUT_INVALID,
                        context={"task": task},
                    )
                call.answered(
                    provider=response.provider if isinstance(response.provider, str) else None,
                    model=response.model if isinstance(response.model, str) else None,
                    finish_reason=response.finish_reason
                    if isinstance(response.finish_reason, str)
                    else None,
                    input_tokens=_tokens(response.usage, "input_tokens"),
                    output_tokens=_tokens(response.usage, "output_tokens"),
                )
        except KernelError:
            raise
        except Exception as exc:
            # A provider's own exception type must not leak out of the kernel untyped.
            raise ModelGatewayError(context={"task": task, "cause": type(exc).__name__}) from exc
        if ticket is not None:
            ticket.used(
                _tokens(response.usage, "input_tokens"), _tokens(response.usage, "output_tokens")
            )
    elapsed = runtime.clock() - started
    refusal = _refusal(response)
    spent_in = _tokens(response.usage, "input_tokens")
    spent_out = _tokens(response.usage, "output_tokens")
    state.meter.input_tokens += spent_in
    state.meter.output_tokens += spent_out
    state.recorder.emit(
        "model.completed",
        {
            "task": task,
            "provider": response.provider if isinstance(response.provider, str) else provider,
            "model": response.model if isinstance(response.model, str) else route.label,
            "finish_reason": response.finish_reason
            if isinstance(response.finish_reason, str)
            else None,
            "refusal": None if refusal is None else refusal.kind,
            "input_tokens": spent_in,
            "output_tokens": spent_out,
            "duration_ms": max(0, round(elapsed.total_seconds() * 1000)),
        },
        cause=invoked,
    )
    return Reply(None if refusal is not None else response.output, refusal)


_STREAMING: dict[type, bool] = {}


def _streams(gateway: ModelGateway) -> TypeGuard[StreamingModelGateway]:
    """Whether the gateway can stream, checked once per class (a protocol check is slow)."""
    kind = type(gateway)
    known = _STREAMING.get(kind)
    if known is None:
        known = isinstance(gateway, StreamingModelGateway)
        if len(_STREAMING) < 256:
            _STREAMING[kind] = known
    return known


async def _answer(
    gateway: ModelGateway,
    request: ModelRequest,
    on_delta: Callable[[ModelOutputDelta], None] | None,
) -> object:
    """The gateway's answer: streamed when someone listens and the gateway can stream.

    A streamed answer is the first item that is not a delta (``ask`` checks it like
    ``complete``'s); the deltas only feed ``on_delta``, so what is stored never depends on them.
    """
    if on_delta is None or not _streams(gateway):
        return await gateway.complete(request)
    items = gateway.stream(request)
    final: object = None
    try:
        async for item in items:
            if not isinstance(item, ModelOutputDelta):
                final = item
                break
            on_delta(item)
    finally:
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()
    return final
