"""What a host hands the kernel and the store is refused with one typed error per mistake:
an event type that routes nowhere, a malformed effect key (one class whatever is wrong)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from intention_kernel.contracts import (
    DurabilityStore,
    ErrorCode,
    InvalidIdError,
    InvalidInputError,
    KernelEvent,
    TurnScope,
)
from intention_kernel.kernel import Completed, NeedsConfirmation, define_capability
from intention_kernel.testing.conformance import make_result

from .support import FaqAnswer, FaqQuery, make_world, support_agent

BAD_TYPES = ["", " ", "\t\n", "x" * 201]


def _event(scope: TurnScope, type_: str) -> KernelEvent:
    return KernelEvent(
        id="evt-1",
        type=type_,
        occurred_at=datetime.now(UTC),
        thread_id=scope.thread_id,
        turn_id=scope.turn_id,
        sequence=0,
        correlation_id="trace-1",
    )


@pytest.mark.parametrize("bad", BAD_TYPES, ids=["empty", "space", "blank", "too-long"])
async def test_a_committed_event_needs_a_type(durability: DurabilityStore, bad: str) -> None:
    async def commit(scope: TurnScope) -> None:
        await scope.commit(make_result(scope), [_event(scope, bad)])

    with pytest.raises(InvalidInputError) as caught:
        await durability.with_turn("t1", "turn-1", commit)
    assert caught.value.context["field"] == "type"
    assert await durability.read_outbox() == []
    assert await durability.load_checkpoint("t1") is None

    async def good(scope: TurnScope) -> None:
        await scope.commit(make_result(scope), [_event(scope, "x" * 200)])

    await durability.with_turn("t1", "turn-1", good)
    assert [s.event.type for s in await durability.read_outbox()] == ["x" * 200]


async def test_a_capability_event_needs_a_type(durability: DurabilityStore) -> None:
    seen: list[BaseException] = []

    async def emits(context: Any, query: FaqQuery) -> Completed:
        for bad in BAD_TYPES:
            try:
                context.events.emit(bad, {"n": 1})
            except Exception as exc:
                seen.append(exc)
        return Completed(output=FaqAnswer(answer="-"), text="Done.")

    cap = define_capability(
        id="emits.cap",
        version="1.0.0",
        description="Emit events.",
        input=FaqQuery,
        output=FaqAnswer,
        execute=emits,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("emit", [{"capability": "emits.cap", "input": {"topic": "x"}}])
    result = await world.run("turn-1", "emit")
    assert result.checkpoint.revision == 1
    assert len(seen) == len(BAD_TYPES)
    for error in seen:
        assert type(error) is InvalidInputError and error.context["field"] == "type"
    stored = {s.event.type for s in await durability.read_outbox(thread_id="t1")}
    assert not stored & set(BAD_TYPES)


async def test_every_malformed_effect_key_is_one_class(durability: DurabilityStore) -> None:
    """Blank, too long, a control character or not text: ``InvalidIdError`` with one code."""
    refused: list[BaseException] = []

    async def write(context: Any, query: FaqQuery) -> Completed | NeedsConfirmation:
        if context.answer is None:
            return NeedsConfirmation("Try the keys?")
        for key in ("", "   ", "k" * 600, "a\x00b", 42):
            try:
                await context.run_effect(key, lambda authority: {"ok": True})
            except Exception as exc:
                refused.append(exc)
        return Completed(output=FaqAnswer(answer="-"), text="Done.")

    cap = define_capability(
        id="keys.try",
        version="1.0.0",
        description="Try effect keys.",
        input=FaqQuery,
        output=FaqAnswer,
        effect="write",
        confirmation="capability",
        execute=write,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("keys", [{"capability": "keys.try", "input": {"topic": "x"}}])
    world.say("yes", [], answer="yes")
    await world.run("turn-1", "keys")
    await world.run("turn-2", "yes")
    assert len(refused) == 5
    for error in refused:
        assert type(error) is InvalidIdError, repr(error)
        assert error.code is ErrorCode.INVALID_IDEMPOTENCY_KEY
    assert await durability.list_receipts() == []
