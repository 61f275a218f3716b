"""The model gateway: the only way the kernel reaches a language model.

Why a protocol: the kernel must run the same with a hosted provider, a local model or a
scripted gateway in tests, and every request is a plain, JSON-storable record so it can be
logged, replayed in evaluations and redacted.

A request names its ``task`` (``interpret``, ``repair``, ``compose``), the ``model`` the agent
asked for, a ``system`` text, a JSON ``input`` and the JSON Schema the answer must match. The
gateway returns ``ModelResponse.output``; the kernel validates it and never trusts it.
A provider failure is raised as ``ModelGatewayError`` (retryable).
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = ["ModelGateway", "ModelRequest", "ModelResponse", "ModelTask"]

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


class ModelResponse(BaseModel):
    """A model's answer: ``output`` is untrusted JSON the kernel validates before use;
    ``model`` and ``usage`` (token counts by name) are reported as the provider gave them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    output: JsonValue = None
    model: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)


class ModelGateway(Protocol):
    """Answers one structured request. Implementations raise ``ModelGatewayError`` on failure."""

    async def complete(self, request: ModelRequest) -> ModelResponse: ...
