"""``ScriptedModelGateway``: a deterministic model for tests, evaluations and the demo.

Each task (``interpret``, ``repair``, ``compose``) gets a script entry: a JSON value (answered
every time), a function of the request (``request -> value``, sync or async), or a list of
those (answered in turn; the last one repeats). Every request is recorded, so tests can assert
how many model calls a turn made (``count("interpret")``, ``calls``).

It streams too (``stream``): the JSON of its answer in pieces of ``chunk_size`` characters, each
after a real suspension (so a test can cancel between them), then the ``ModelResponse``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from pydantic import JsonValue

from ..contracts.errors import ModelGatewayError
from ..contracts.gateway import ModelOutputDelta, ModelRequest, ModelResponse

__all__ = ["ScriptEntry", "ScriptedModelGateway"]

ScriptEntry = JsonValue | Callable[[ModelRequest], Any]


class ScriptedModelGateway:
    """A ``ModelGateway`` answering from a script per task and recording every request.

    A task without a script entry raises ``ModelGatewayError``, as a failing provider would;
    an entry that returns an exception raises it.
    """

    def __init__(
        self,
        script: Mapping[str, ScriptEntry | Sequence[ScriptEntry]] | None = None,
        *,
        chunk_size: int = 8,
    ):
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self.chunk_size = chunk_size
        self._script: dict[str, Any] = dict(script or {})
        self._cursor: dict[str, int] = {}
        self.calls: list[ModelRequest] = []

    def set(self, task: str, entry: ScriptEntry | Sequence[ScriptEntry]) -> None:
        """Replace the script of one task (and restart its sequence)."""
        self._script[task] = entry
        self._cursor.pop(task, None)

    def count(self, task: str | None = None) -> int:
        return len(self.calls) if task is None else sum(1 for c in self.calls if c.task == task)

    def reset_calls(self) -> None:
        self.calls.clear()

    def _entry(self, task: str) -> Any:
        if task not in self._script:
            raise ModelGatewayError(
                "the scripted gateway has no answer for this task", context={"task": task}
            )
        entry = self._script[task]
        if isinstance(entry, list | tuple):
            if not entry:
                raise ModelGatewayError("empty script", context={"task": task})
            index = self._cursor.get(task, 0)
            self._cursor[task] = index + 1
            return entry[min(index, len(entry) - 1)]
        return entry

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls.append(request)
        entry = self._entry(request.task)
        if callable(entry):
            value = entry(request)
            if inspect.isawaitable(value):
                value = await value
            if isinstance(value, BaseException):
                raise value
        else:
            value = entry
        if isinstance(value, ModelResponse):
            return value
        return ModelResponse.model_construct(output=value, model=request.model, usage={})

    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[ModelOutputDelta | ModelResponse]:
        """The answer ``complete`` gives, first as its JSON text in small pieces."""
        response = await self.complete(request)
        if response.output is not None:
            text = json.dumps(response.output, ensure_ascii=False)
            for start in range(0, len(text), self.chunk_size):
                await asyncio.sleep(0)
                yield ModelOutputDelta(text=text[start : start + self.chunk_size])
        await asyncio.sleep(0)
        yield response
