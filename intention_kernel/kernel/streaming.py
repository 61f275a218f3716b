"""What ``CompiledAgent.stream`` yields while a turn runs, and how it is produced.

Why typed items and one driver: a consumer (a chat UI, a server-sent-events endpoint) shows
progress while the turn runs, but only the committed ``TurnResult`` is the answer. Every item
before ``TurnCompleted`` is provisional; ``TurnCompleted`` is yielded only after the turn
committed, so a stream never ends with a result that was not stored. The turn runs in its own
task: closing or cancelling the consumer cancels that task and waits for it, exactly as
cancelling ``run`` does (started storage work finishes, then the cancellation goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import JsonValue

from ..contracts.events import EventCategory, KernelEvent
from ..contracts.gateway import ModelOutputDelta
from ._events import EventRecorder, Redactor
from ._response import TurnResult
from ._states import StepStatus

__all__ = [
    "ConfirmationHeld",
    "ProviderWait",
    "RoundStarted",
    "StepFinished",
    "StepProgress",
    "StepStarted",
    "StreamItem",
    "TextDelta",
    "TurnCompleted",
]


@dataclass(frozen=True, slots=True)
class StepStarted:
    """A planned step began to run (its capability was called)."""

    step_id: str
    capability_id: str


@dataclass(frozen=True, slots=True)
class StepFinished:
    """A step ended this attempt with ``status`` (``completed``, ``failed``, ``uncertain``...).

    Provisional like every item before ``TurnCompleted``: the committed ``response.steps`` say
    how the turn's steps ended.
    """

    step_id: str
    capability_id: str
    status: StepStatus


@dataclass(frozen=True, slots=True)
class StepProgress:
    """A running step's own report of how far it got (``context.report_progress``, e.g. an
    MCP tool's progress notifications): ``progress`` of ``total`` when known. Advisory, never
    part of the committed turn."""

    step_id: str
    capability_id: str
    message: str
    progress: float | None = None
    total: float | None = None


@dataclass(frozen=True, slots=True)
class RoundStarted:
    """The model asked to see what the steps so far returned and is planning round ``round``
    (2 and up; a tool loop within the turn, ``KernelLimits.max_rounds``)."""

    round: int


@dataclass(frozen=True, slots=True)
class ConfirmationHeld:
    """The answer asks the user a question and the thread will wait on it.

    ``kind`` is the interaction's kind (``confirmation`` for consent to a write, ``input`` for
    missing details); ``interaction_id`` and ``options`` are what a UI button sends back as
    ``selection``, once the turn committed.
    """

    interaction_id: str
    kind: str
    prompt: str
    options: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Provisional answer text: append ``text``; ``restarted`` says drop what was shown first.

    Applied in order (``shown = ("" if d.restarted else shown) + d.text``), the deltas before
    ``TurnCompleted`` add up to exactly ``result.response.text``.
    """

    text: str
    restarted: bool = False


@dataclass(frozen=True, slots=True)
class TurnCompleted:
    """The last item: the committed (or replayed) turn, the same ``TurnResult`` ``run`` returns."""

    result: TurnResult


@dataclass(frozen=True, slots=True)
class ProviderWait:
    """The turn waits before its next model call: every slot of ``provider`` is taken
    (``busy``), this minute's calls have all started (``rate``) or the provider asked every
    process to back off (``cooling``); ``seconds`` is the wait expected now (``busy``: until a
    slot frees). Shown once per call, before the wait."""

    provider: str
    reason: str
    seconds: float


StreamItem = (
    StepStarted
    | StepFinished
    | StepProgress
    | RoundStarted
    | ConfirmationHeld
    | TextDelta
    | TurnCompleted
    | ProviderWait
)
"""Everything ``CompiledAgent.stream`` yields; ``TurnCompleted`` always comes last."""

Listener = Callable[[StreamItem], None]

_FINISHED = frozenset(f"step.{status}" for status in StepStatus)


class TextField:
    """Decodes the ``text`` member of a JSON object while its source arrives in pieces.

    Why by hand: the composing model writes ``{"text": ..., "citations": [...]}`` and the
    answer should show while it is written, before the JSON is complete. Only the top-level
    ``text`` string is decoded (escapes, ``\\uXXXX`` and surrogate pairs split anywhere);
    anything malformed stops the preview, never the turn (the final response is parsed and
    checked on its own).
    """

    __slots__ = (
        "_broken",
        "_done",
        "_escape",
        "_expect_key",
        "_high",
        "_key",
        "_last_key",
        "_role",
        "_stack",
    )

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._expect_key = False
        self._role: str | None = None  # inside a string: "key", "text" or "other"
        self._escape: str | None = None  # an escape read so far, after the backslash
        self._key: list[str] = []
        self._last_key: str | None = None
        self._high: str | None = None  # a high surrogate waiting for its low half
        self._done = False
        self._broken = False

    def feed(self, chunk: str) -> str:
        """The text of the ``text`` member that ``chunk`` adds (maybe empty)."""
        if self._broken or self._done:
            return ""
        out: list[str] = []
        for char in chunk:
            if self._role is not None:
                self._in_string(char, out)
            else:
                self._outside(char)
            if self._broken or self._done:
                break
        return "".join(out)

    def _outside(self, char: str) -> None:
        stack = self._stack
        if char in "{[":
            stack.append(char)
            self._expect_key = char == "{" and len(stack) == 1
        elif char in "}]":
            if not stack:
                self._broken = True
            else:
                stack.pop()
        elif char == '"':
            if not stack:
                self._broken = True
            elif len(stack) == 1 and stack[0] == "{":
                if self._expect_key:
                    self._role = "key"
                    self._key = []
                else:
                    self._role = "text" if self._last_key == "text" else "other"
            else:
                self._role = "other"
        elif len(stack) == 1 and stack[0] == "{":
            if char == ":":
                self._expect_key = False
            elif char == ",":
                self._expect_key = True

    def _in_string(self, char: str, out: list[str]) -> None:
        escape = self._escape
        if escape is not None:
            escape += char
            if escape[0] == "u":
                if len(escape) < 5:
                    self._escape = escape
                    return
                try:
                    decoded = chr(int(escape[1:], 16))
                except ValueError:
                    self._broken = True
                    return
            else:
                simple = _ESCAPES.get(char)
                if simple is None:
                    self._broken = True
                    return
                decoded = simple
            self._escape = None
            self._char(decoded, out)
        elif char == "\\":
            self._escape = ""
        elif char == '"':
            self._end_string(out)
        else:
            self._char(char, out)

    def _char(self, char: str, out: list[str]) -> None:
        if self._role == "key":
            self._key.append(char)
        elif self._role == "text":
            high, self._high = self._high, None
            if high is not None:
                if "\udc00" <= char <= "\udfff":
                    char = chr(0x10000 + ((ord(high) - 0xD800) << 10) + (ord(char) - 0xDC00))
                else:
                    out.append(high)  # a lone surrogate, as ``json.loads`` keeps it
            if "\ud800" <= char <= "\udbff":
                self._high = char
            else:
                out.append(char)

    def _end_string(self, out: list[str]) -> None:
        if self._role == "key":
            self._last_key = "".join(self._key)
        elif self._role == "text":
            if self._high is not None:
                out.append(self._high)
                self._high = None
            self._done = True
        self._role = None


_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class Progress:
    """Turns what a running turn does into stream items for one listener.

    Keeps what the consumer was shown of the answer, so that a recomposition, a retried model
    request or a kernel-worded answer replaces it with a ``restarted`` delta, and the deltas
    always add up to the final text.
    """

    __slots__ = ("_before_commit", "_decoder", "_listener", "_shown")

    def __init__(
        self,
        listener: Listener,
        before_commit: Callable[[], Coroutine[Any, Any, list[str]]] | None = None,
    ) -> None:
        self._listener = listener
        self._shown = ""
        self._decoder = TextField()
        self._before_commit = before_commit

    async def before_commit(self) -> list[str]:
        """Called by the turn just before it commits: a listener that records progress
        elsewhere (the inbox's progress log) hands over what it has not written yet, which
        the commit writes with the result (so a watcher never reads the result without it)."""
        if self._before_commit is None:
            return []
        return await self._before_commit()

    def emit(self, item: StreamItem) -> None:
        self._listener(item)

    def compose_started(self) -> None:
        """A new composing request: its text replaces whatever an earlier one showed."""
        self._decoder = TextField()
        self._restart()

    def model_delta(self, delta: ModelOutputDelta) -> None:
        """A piece of the composing model's raw output."""
        if delta.restarted:
            self._decoder = TextField()
            self._restart()
        text = self._decoder.feed(delta.text)
        if text:
            self._shown += text
            self.emit(TextDelta(text))

    def settle(self, text: str) -> None:
        """Make what was shown equal ``text``: the rest of it, or all of it after a restart."""
        shown = self._shown
        if text == shown:
            return
        self._shown = text
        if text.startswith(shown):
            self.emit(TextDelta(text[len(shown) :]))
        else:
            self.emit(TextDelta(text, restarted=True))

    def _restart(self) -> None:
        if self._shown:
            self._shown = ""
            self.emit(TextDelta("", restarted=True))


class ProgressRecorder(EventRecorder):
    """An ``EventRecorder`` that also reports step starts and ends to a ``Progress``."""

    __slots__ = ("_progress",)

    def __init__(
        self,
        thread_id: str,
        turn_id: str,
        trace_id: str,
        redact: Redactor | None,
        clock: Callable[[], datetime] | None,
        progress: Progress,
    ) -> None:
        super().__init__(thread_id, turn_id, trace_id, redact, clock)
        self._progress = progress

    def emit(
        self,
        type: str,
        data: dict[str, JsonValue] | None = None,
        *,
        cause: KernelEvent | None = None,
        step_id: str | None = None,
        category: EventCategory = EventCategory.TRACE,
    ) -> KernelEvent:
        event = super().emit(type, data, cause=cause, step_id=step_id, category=category)
        if type == "round.started":
            number = event.data.get("round")
            if isinstance(number, int):
                self._progress.emit(RoundStarted(number))
        if step_id is not None and (type == "step.started" or type in _FINISHED):
            capability = event.data.get("capability_id")
            if isinstance(capability, str):
                if type == "step.started":
                    self._progress.emit(StepStarted(step_id, capability))
                else:
                    status = StepStatus(type.removeprefix("step."))
                    self._progress.emit(StepFinished(step_id, capability, status))
        return event

    def report(self, item: StepProgress) -> None:
        """A step's own progress (``context.report_progress``), passed on as it is."""
        self._progress.emit(item)


async def drive(
    turn: Callable[[Progress], Coroutine[Any, Any, TurnResult]],
) -> AsyncIterator[StreamItem]:
    """Run ``turn`` in its own task and yield its progress, then ``TurnCompleted``.

    The result is yielded only once the task returned, that is after the turn committed (or
    was replayed); a failed turn raises its error after the items it produced. Closed or
    cancelled early, the turn's task is cancelled and awaited before the stream ends, so the
    consumer's cancellation behaves like a cancelled ``run``.
    """
    items: asyncio.Queue[StreamItem | None] = asyncio.Queue()
    task: asyncio.Task[TurnResult] = asyncio.get_running_loop().create_task(
        turn(Progress(items.put_nowait))
    )
    task.add_done_callback(lambda _: items.put_nowait(None))
    try:
        while (item := await items.get()) is not None:
            yield item
        result = task.result()  # the turn's own error, if it failed
    finally:
        if not task.done():
            task.cancel()
            await _finish(task)
        elif not task.cancelled():
            task.exception()  # retrieved: the consumer left, or it is raised above
    yield TurnCompleted(result)


async def _finish(task: asyncio.Task[TurnResult]) -> None:
    """Wait until the cancelled turn ended; a cancellation of our own waits too, then goes on."""
    interrupted = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            interrupted = True
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.result()  # what it ended with is the consumer's no longer
    if interrupted:
        raise asyncio.CancelledError
