"""The model gateway: the only way the kernel reaches a language model.

Why a protocol: the kernel must run the same with a hosted provider, a local model or a
scripted gateway in tests, and every request is a plain, JSON-storable record so it can be
logged, replayed in evaluations and redacted.

A request names its ``task`` (``interpret``, ``repair``, ``compose``), the ``model`` the agent
asked for, a ``system`` text, a JSON ``input`` and the JSON Schema the answer must match. The
gateway returns ``ModelResponse.output``; the kernel validates it and never trusts it.
A provider failure is raised as ``ModelGatewayError`` (``retryable`` says whether sending the
same request again may help). A provider that declines to answer (a refusal or a content-filter
stop) is not a failure: the response carries a ``ModelRefusal`` and no output.

A gateway may also ``stream`` (``StreamingModelGateway``): it yields the raw output text as the
provider writes it (``ModelOutputDelta``), then exactly one ``ModelResponse``, the same one
``complete`` would have returned. Deltas are provisional: the kernel uses only the final
response, so a stream cut short or retried never changes what is stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = [
    "ModelGateway",
    "ModelOutputDelta",
    "ModelRefusal",
    "ModelRequest",
    "ModelResponse",
    "ModelTask",
    "StreamingModelGateway",
]

ModelTask = str
"""``interpret`` | ``repair`` | ``compose`` (open for future tasks)."""


class ModelRequest(BaseModel):
    """One structured question to a model: plain JSON, so it can be logged, replayed in
    evaluations and redacted.

    ``task`` says which stage asks (``interpret``, ``repair``, ``compose``); ``model`` is the
    model the agent asked for (``None``: the gateway's default); ``output_schema`` is the JSON
    Schema the answer must match, which the kernel checks again itself.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: ModelTask
    model: str | None = None
    system: str = ""
    input: dict[str, JsonValue] = Field(default_factory=dict)
    output_schema: dict[str, JsonValue] = Field(default_factory=dict)


class ModelRefusal(BaseModel):
    """The provider declined to answer: the model refused, or a content filter stopped it.

    Its own outcome because neither a retry nor a repair helps (the same question gets the same
    answer): the kernel answers with a safe fallback instead. ``message`` is the provider's
    explanation, untrusted model text that is never shown as the agent's answer.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["refusal", "content_filter"]
    message: str = ""


class ModelResponse(BaseModel):
    """A model's answer: ``output`` is untrusted JSON the kernel validates before use.

    ``model`` and ``provider`` name who answered, as the provider reported it. ``usage`` counts
    tokens by name: ``input_tokens`` (everything read, cached or not) and ``output_tokens``.
    ``finish_reason`` is ``stop`` (a complete answer), ``length`` (cut off at the token limit:
    the output is usually not valid JSON), ``refusal`` or ``content_filter`` (then ``refusal``
    is set and ``output`` is ``None``); ``None`` when unknown.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    output: JsonValue = None
    model: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    provider: str | None = None
    finish_reason: str | None = None
    refusal: ModelRefusal | None = None


class ModelGateway(Protocol):
    """Answers one structured request. Implementations raise ``ModelGatewayError`` on failure."""

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


class ModelOutputDelta(BaseModel):
    """A piece of the model's raw output text (usually JSON), in the order the provider wrote it.

    Concatenated, a stream's deltas are the text the final ``ModelResponse.output`` was parsed
    from. A retried request starts a new sequence after ``restarted=True``: a consumer drops
    what it had shown of the earlier attempt.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    restarted: bool = False


@runtime_checkable
class StreamingModelGateway(ModelGateway, Protocol):
    """A gateway that can also stream: deltas of the raw output, then one final response.

    The last item is always the ``ModelResponse`` (validated by the kernel like ``complete``'s);
    a failure raises ``ModelGatewayError`` as ``complete`` does.
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutputDelta | ModelResponse]: ...
