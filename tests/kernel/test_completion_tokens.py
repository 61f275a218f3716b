"""Completion tokens: a capability hands the outside world a token that completes its parked
step, and nothing else. It is the same on every run of the step; it completes that key of that
thread only; a forged one, one of another thread or key, or one shown to an agent without the
secret is ``EXTERNAL_TOKEN_INVALID`` with nothing written; a rotated secret still checks the
tokens handed out before. On every store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from intention_kernel.contracts import DurabilityStore
from intention_kernel.contracts.errors import ConfigurationError, ErrorCode, InvalidInputError
from intention_kernel.contracts.inbox import RequestState
from intention_kernel.kernel import (
    AwaitingExternal,
    CapabilityContext,
    Completed,
    Kernel,
    define_capability,
)
from intention_kernel.kernel._completion import CompletionTokens
from intention_kernel.testing import ScriptedModelGateway

from .support import Clock, World, make_world, support_agent

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
SECRET = "a completion secret of 32 bytes or more"
OLD_SECRET = "the secret before the rotation, 32+ bytes"


class Review(BaseModel):
    document: str


class Verdict(BaseModel):
    approved: bool


def _review_capability(handed: list[str]) -> Any:
    async def review(context: CapabilityContext, job: Review) -> AwaitingExternal | Completed:
        key = f"review-{job.document}"
        handed.append(context.completion_token(key))  # what the reviewer is sent
        if context.external is None:
            return AwaitingExternal(key=key, timeout=timedelta(hours=1))
        result = context.external.result
        approved = isinstance(result, dict) and result.get("approved") is True
        return Completed(output=Verdict(approved=approved), text=f"Approved: {approved}.")

    return define_capability(
        id="documents.review",
        version="1.0.0",
        description="Have a document reviewed.",
        input=Review,
        output=Verdict,
        execute=review,
    )


def _world(durability: DurabilityStore, secret: Any = SECRET) -> tuple[World, list[str]]:
    handed: list[str] = []
    world = make_world(
        durability,
        agent=support_agent([_review_capability(handed)]),
        clock=Clock(T0),
        completion_secret=secret,
    )
    world.say("review d1", [{"capability": "documents.review", "input": {"document": "d1"}}])
    return world, handed


async def _requests(durability: DurabilityStore) -> list[Any]:
    inbox: Any = getattr(durability, "inbox")  # noqa: B009 - the store's inbox
    found: list[Any] = await inbox.list_requests(thread_id="t1")
    return found


async def test_the_token_handed_out_completes_its_step(durability: DurabilityStore) -> None:
    world, handed = _world(durability)
    await world.run("turn-1", "review d1")
    [token] = handed
    assert token.startswith("ikc1.") and len(token) < 64
    request = await world.agent.complete_external(
        thread_id="t1", key="review-d1", result={"approved": True}, token=token
    )
    assert (request.turn_id, request.state) == ("review-d1@completed", RequestState.PENDING)
    done = await world.agent.run(
        thread_id="t1",
        turn_id=request.turn_id,
        text=request.text,
        selection=request.selection,
    )
    assert "Approved: True." in done.response.text
    assert handed == [token, token]  # the resumed run hands out the same token
    again = await world.agent.complete_external(
        thread_id="t1", key="review-d1", result={"approved": True}, token=token
    )
    assert again.state is RequestState.DONE  # the token's completion replays


@pytest.mark.parametrize(
    ("thread_id", "key", "token_of"),
    [
        ("t2", "review-d1", lambda t: t),  # another thread
        ("t1", "review-d2", lambda t: t),  # another key
        ("t1", "review-d1", lambda t: t[:-3] + ("AAA" if not t.endswith("AAA") else "BBB")),
        ("t1", "review-d1", lambda t: "ikc1."),
        ("t1", "review-d1", lambda t: "not-a-token"),
        ("t1", "review-d1", lambda t: t + "A" * 60),
    ],
)
async def test_a_token_that_does_not_complete_the_key_is_refused(
    durability: DurabilityStore, thread_id: str, key: str, token_of: Any
) -> None:
    world, handed = _world(durability)
    await world.run("turn-1", "review d1")
    with pytest.raises(InvalidInputError) as refused:
        await world.agent.complete_external(
            thread_id=thread_id, key=key, result={"approved": True}, token=token_of(handed[0])
        )
    assert refused.value.code == ErrorCode.EXTERNAL_TOKEN_INVALID
    assert refused.value.context == {"field": "token"}
    assert await _requests(durability) == []  # nothing written


async def test_a_rotated_secret_still_checks_the_tokens_handed_out(
    durability: DurabilityStore,
) -> None:
    before, handed = _world(durability, secret=OLD_SECRET)
    await before.run("turn-1", "review d1")
    after, _ = _world(durability, secret=[SECRET, OLD_SECRET])  # the new secret signs now
    request = await after.agent.complete_external(
        thread_id="t1", key="review-d1", result={"approved": False}, token=handed[0]
    )
    assert request.turn_id == "review-d1@completed"
    forgotten, _ = _world(durability, secret=SECRET)  # the old secret dropped: refused
    with pytest.raises(InvalidInputError) as refused:
        await forgotten.agent.complete_external(
            thread_id="t1", key="review-d1", result={"approved": False}, token=handed[0]
        )
    assert refused.value.code == ErrorCode.EXTERNAL_TOKEN_INVALID


async def test_without_a_secret_no_token_is_handed_out_or_accepted(
    durability: DurabilityStore,
) -> None:
    world, handed = _world(durability, secret=None)
    result = await world.run("turn-1", "review d1")
    [step] = result.response.steps
    assert step.status == "failed" and handed == []  # completion_token raised
    with pytest.raises(InvalidInputError) as refused:
        await world.agent.complete_external(
            thread_id="t1", key="review-d1", result={}, token="ikc1.AAAA"
        )
    assert refused.value.code == ErrorCode.EXTERNAL_TOKEN_INVALID


@pytest.mark.parametrize(
    "secret", ["short", b"x" * 31, [], ["a" * 32, "short"], 42, {"a": "b" * 32}]
)
def test_a_bad_secret_is_a_configuration_error(secret: Any) -> None:
    from intention_kernel.durability.memory import MemoryDurability

    with pytest.raises(ConfigurationError) as refused:
        Kernel(
            durability=MemoryDurability(),
            model=ScriptedModelGateway({}),
            completion_secret=secret,
        )
    assert "completion" in str(refused.value.context)


ids = st.text(
    st.characters(min_codepoint=33, max_codepoint=0x2FFF, exclude_characters="@"),
    min_size=1,
    max_size=40,
)


@given(thread=ids, key=ids, other_thread=ids, other_key=ids)
def test_a_token_verifies_for_its_own_thread_and_key_only(
    thread: str, key: str, other_thread: str, other_key: str
) -> None:
    tokens = CompletionTokens([SECRET])
    token = tokens.sign(thread, key)
    assert tokens.verify(token, thread, key)
    assert tokens.sign(thread, key) == token  # the same every time
    if (other_thread, other_key) != (thread, key):
        assert not tokens.verify(token, other_thread, other_key)
    assert not CompletionTokens([OLD_SECRET]).verify(token, thread, key)
