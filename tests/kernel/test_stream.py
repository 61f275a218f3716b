"""``CompiledAgent.stream``: typed progress, provisional text, the committed result last."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from intention_kernel import (
    ConfirmationHeld,
    DurabilityError,
    StepFinished,
    StepStarted,
    StepStatus,
    StreamItem,
    TextDelta,
    TurnCompleted,
    TurnResult,
)
from intention_kernel.contracts import (
    DurabilityStore,
    InvalidIdError,
    ModelGatewayError,
    ModelOutputDelta,
    ModelRequest,
    ModelResponse,
    TurnScope,
)
from intention_kernel.kernel.streaming import TextField
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

from .support import make_world
from .writes import LOOKUP_42 as LOOKUP
from .writes import accept, payments_world

T = TypeVar("T")


async def collect(items: AsyncIterator[StreamItem]) -> list[StreamItem]:
    return [item async for item in items]


async def follow(items: AsyncIterator[StreamItem], seen: list[StreamItem]) -> None:
    """Consume a stream, keeping what arrived before it raised."""
    async for item in items:
        seen.append(item)


def shown(items: list[StreamItem]) -> str:
    """What a consumer that follows the ``TextDelta`` rule has on screen."""
    text = ""
    for item in items:
        if isinstance(item, TextDelta):
            text = ("" if item.restarted else text) + item.text
    return text


def final(items: list[StreamItem]) -> TurnResult:
    last = items[-1]
    assert isinstance(last, TurnCompleted)
    assert not any(isinstance(i, TurnCompleted) for i in items[:-1])
    return last.result


# -- the incremental decoder ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(),
    citations=st.lists(st.text(max_size=5), max_size=3),
    citations_first=st.booleans(),
    ascii_only=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_any_split_of_the_json_decodes_to_the_text(
    text: str, citations: list[str], citations_first: bool, ascii_only: bool, cuts: list[int]
) -> None:
    answer: dict[str, Any] = (
        {"citations": citations, "text": text}
        if citations_first
        else {"text": text, "citations": citations}
    )
    source = json.dumps(answer, ensure_ascii=ascii_only)
    points = sorted({min(c, len(source)) for c in cuts} | {0, len(source)})
    decoder = TextField()
    out = "".join(decoder.feed(source[a:b]) for a, b in itertools.pairwise(points))
    assert out == text


@given(text=st.text(alphabet=st.characters(codec="utf-8"), min_size=1))
def test_surrogate_pairs_split_between_pieces(text: str) -> None:
    source = json.dumps({"text": "\U0001f600" + text})  # \ud83d\ude00 in the source
    decoder = TextField()
    out = "".join(decoder.feed(char) for char in source)
    assert out == "\U0001f600" + text


def test_only_the_top_level_text_member_is_shown() -> None:
    source = '{"nested": {"text": "no"}, "list": ["text", "x"], "text": "yes \\"q\\"\\n", "z": 1}'
    assert TextField().feed(source) == 'yes "q"\n'


def test_malformed_output_stops_the_preview_without_raising() -> None:
    decoder = TextField()
    assert decoder.feed('{"text": "ab\\q') == "ab"
    assert decoder.feed('cd"}') == ""


# -- streamed turns ----------------------------------------------------------------------------


async def test_a_turn_streams_its_steps_text_and_committed_result(
    durability: DurabilityStore,
) -> None:
    world = make_world(durability)
    world.gateway.chunk_size = 2
    world.say("where is order 42?", LOOKUP)
    items = await collect(
        world.agent.stream(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    )
    result = final(items)
    assert not result.replayed
    assert result.response.text == "Order 42 has shipped."
    [step] = result.response.steps
    assert items[0] == StepStarted(step.step_id, "orders.lookup")
    assert items[1] == StepFinished(step.step_id, "orders.lookup", StepStatus.COMPLETED)
    deltas = [i for i in items if isinstance(i, TextDelta)]
    assert len(deltas) > 3, "the answer arrives in pieces while the model writes it"
    assert shown(items) == result.response.text
    stored = await durability.get_turn("t1", "turn-1")
    assert stored is not None and isinstance(stored.response, dict)
    assert stored.response["text"] == result.response.text


async def test_a_replayed_turn_streams_its_stored_answer_at_once(
    durability: DurabilityStore,
) -> None:
    world = make_world(durability)
    world.say("where is order 42?", LOOKUP)
    first = await world.run("turn-1", "where is order 42?")
    world.gateway.reset_calls()
    items = await collect(
        world.agent.stream(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    )
    assert items[:-1] == [TextDelta(first.response.text)]
    result = final(items)
    assert result.replayed and result.response == first.response
    assert world.gateway.calls == [], "a replay asks no model"


async def test_a_held_confirmation_is_announced_with_what_a_button_sends() -> None:
    world, _ = payments_world(MemoryDurability())
    items = await collect(world.agent.stream(thread_id="t1", turn_id="turn-1", text="charge 42"))
    result = final(items)
    interaction = result.checkpoint.interaction
    assert interaction is not None
    held = [i for i in items if isinstance(i, ConfirmationHeld)]
    assert held == [
        ConfirmationHeld(interaction.id, "confirmation", interaction.prompt, ("yes", "no"))
    ]
    assert shown(items) == result.response.text
    selection = {"interaction_id": held[0].interaction_id, "option": "yes"}
    assert selection == accept(result)


class CountingGateway(ScriptedModelGateway):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.streamed = 0

    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[ModelOutputDelta | ModelResponse]:
        self.streamed += 1
        async for item in super().stream(request):
            yield item


async def test_the_gateway_streams_only_for_a_stream_consumer_and_only_to_compose() -> None:
    world = make_world(MemoryDurability())
    gateway = CountingGateway(world.gateway._script)
    world.say("where is order 42?", LOOKUP)
    agent = type(world.kernel)(durability=world.durability, model=gateway, ports=world.kernel.ports)
    compiled = agent.compile(world.agent_definition())
    ran = await compiled.run(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    assert gateway.streamed == 0 and gateway.count() == 2
    items = await collect(
        compiled.stream(thread_id="t2", turn_id="turn-1", text="where is order 42?")
    )
    assert gateway.streamed == 1, "interpret is asked with complete, compose streams"
    assert final(items).response.text == ran.response.text


async def test_a_recomposition_restarts_the_shown_text() -> None:
    world = make_world(MemoryDurability())
    world.say("where is order 42?", LOOKUP)
    world.gateway.set(
        "compose",
        [
            {"text": "Shipped, trust me.", "citations": ["ev_made_up"]},
            lambda request: {"text": "Order 42 is shipped.", "citations": []},
        ],
    )
    items = await collect(
        world.agent.stream(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    )
    texts = [i for i in items if isinstance(i, TextDelta)]
    assert any(t.restarted for t in texts), "the rejected answer is taken back"
    first_restart = next(n for n, t in enumerate(texts) if t.restarted)
    assert "trust me" in "".join(t.text for t in texts[:first_restart])
    assert shown(items) == final(items).response.text == "Order 42 is shipped."


async def test_a_restarted_model_delta_takes_back_what_was_shown() -> None:
    class Retrying(ScriptedModelGateway):
        async def stream(
            self, request: ModelRequest
        ) -> AsyncIterator[ModelOutputDelta | ModelResponse]:
            if request.task == "compose":
                yield ModelOutputDelta(text='{"text": "Half an ans')
                yield ModelOutputDelta(text='{"text": "Order 42', restarted=True)
                yield ModelOutputDelta(text=' is shipped.", "citations": []}')
                yield ModelResponse(output={"text": "Order 42 is shipped.", "citations": []})
            else:
                yield await self.complete(request)

    world = make_world(MemoryDurability())
    world.say("where is order 42?", LOOKUP)
    gateway = Retrying(world.gateway._script)
    agent = type(world.kernel)(durability=world.durability, model=gateway, ports=world.kernel.ports)
    compiled = agent.compile(world.agent_definition())
    items = await collect(
        compiled.stream(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    )
    texts = [i for i in items if isinstance(i, TextDelta)]
    assert texts[0] == TextDelta("Half an ans")
    assert texts[1] == TextDelta("", restarted=True)
    assert shown(items) == final(items).response.text == "Order 42 is shipped."


async def test_a_stream_that_ends_without_a_response_fails_the_turn_typed() -> None:
    class Truncated(ScriptedModelGateway):
        async def stream(
            self, request: ModelRequest
        ) -> AsyncIterator[ModelOutputDelta | ModelResponse]:
            yield ModelOutputDelta(text='{"text": "Ord')

    world = make_world(MemoryDurability())
    world.say("where is order 42?", LOOKUP)
    gateway = Truncated(world.gateway._script)
    agent = type(world.kernel)(durability=world.durability, model=gateway, ports=world.kernel.ports)
    compiled = agent.compile(world.agent_definition())
    seen: list[StreamItem] = []
    items = compiled.stream(thread_id="t1", turn_id="t", text="where is order 42?")
    with pytest.raises(ModelGatewayError) as caught:
        await follow(items, seen)
    assert caught.value.code == "MODEL_OUTPUT_INVALID"
    assert not any(isinstance(i, TurnCompleted) for i in seen)
    assert await world.durability.get_turn("t1", "t") is None


class RefusingScope:
    """A turn scope whose commit fails: the turn ran, nothing is stored."""

    def __init__(self, inner: TurnScope) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit(self, *args: Any, **kwargs: Any) -> None:
        raise DurabilityError("the commit failed")


class FailingCommit:
    """A store whose commits fail."""

    def __init__(self, inner: DurabilityStore) -> None:
        self.inner = inner

    async def with_turn(
        self,
        thread_id: str,
        turn_id: str,
        operation: Callable[[TurnScope], Awaitable[T]],
        *,
        request_fingerprint: str | None = None,
    ) -> T:
        async def refused(scope: TurnScope) -> T:
            return await operation(cast(TurnScope, RefusingScope(scope)))

        return await self.inner.with_turn(
            thread_id, turn_id, refused, request_fingerprint=request_fingerprint
        )

    def turn(
        self, thread_id: str, turn_id: str, *, request_fingerprint: str | None = None
    ) -> AbstractAsyncContextManager[TurnScope]:
        return self.inner.turn(thread_id, turn_id, request_fingerprint=request_fingerprint)

    async def close(self) -> None:
        await self.inner.close()


async def test_a_failed_commit_ends_the_stream_with_the_error_never_a_result() -> None:
    store = MemoryDurability()
    world = make_world(store)
    world.say("where is order 42?", LOOKUP)
    failing = type(world.kernel)(
        durability=FailingCommit(store), model=world.gateway, ports=world.kernel.ports
    ).compile(world.agent_definition())
    seen: list[StreamItem] = []
    items = failing.stream(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    with pytest.raises(DurabilityError, match="the commit failed"):
        await follow(items, seen)
    assert shown(seen) == "Order 42 has shipped.", "the text was shown, provisionally"
    assert not any(isinstance(i, TurnCompleted) for i in seen)
    assert await store.get_turn("t1", "turn-1") is None
    again = await collect(
        world.agent.stream(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    )
    assert not final(again).replayed, "delivered again, the turn runs"


async def test_a_refused_request_is_raised_by_the_first_iteration() -> None:
    world = make_world(MemoryDurability())
    items = world.agent.stream(thread_id="t1", turn_id="bad\x00id", text="hi")
    with pytest.raises(InvalidIdError):
        await anext(items)
    assert world.gateway.calls == []


def test_stream_items_are_frozen() -> None:
    delta = TextDelta("a")
    with pytest.raises(AttributeError):
        delta.text = "b"  # type: ignore[misc]
    assert TextDelta("a") == TextDelta("a", restarted=False)
