"""Adversarial values at every way into a turn: refused with a typed error and nothing written,
or committed and read back equal (huge integers, deep nesting, non-JSON types, NaN, lone
surrogates, NUL, bidi and zero-width characters)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from intention_kernel.contracts import ErrorCode, InvalidInputError
from intention_kernel.kernel import CapabilityContext, Completed, define_capability
from intention_kernel.testing import MemoryDurability

from .support import FaqAnswer, FaqQuery, make_world, support_agent
from .writes import CHARGE, CHARGE_42, REFUND, Payments, accept

_CHARS = ["a", "é", "\x00", "\ud800", "\udfff", "\u200b", "\u202e", "\u2066", "\ufeff", "😀", "\n"]
TEXT = st.one_of(st.text(st.sampled_from(_CHARS), max_size=6), st.text(max_size=6))
INTS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**53, 2**63 - 1, -(2**63 - 1), 2**63, -(2**63)]),
    # Built, not listed: an integer of more than 4,300 digits has no repr to show.
    st.builds(pow, st.just(10), st.sampled_from([4300, 4301, 5000])),
)
OPAQUE = st.sampled_from(
    [
        {1, 2},
        frozenset({"a"}),
        b"\xff\xfe",
        b"ok",
        bytearray(b"x"),
        Decimal("1.5"),
        datetime(2026, 1, 1, tzinfo=UTC),
        object(),
        complex(1, 2),
    ]
)
LEAVES = st.one_of(st.none(), st.booleans(), INTS, st.floats(), TEXT, OPAQUE)
KEYS = st.one_of(TEXT, st.integers(0, 3), st.none())
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(KEYS, inner, max_size=3),
    ),
    max_leaves=8,
)


def _nest(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


ADVERSARIAL = st.one_of(
    VALUES, st.builds(_nest, VALUES, st.sampled_from([62, 63, 64, 65, 300, 5000]))
)


def _stored(value: Any) -> Any:
    """What JSON keeps of an accepted value: tuples are arrays."""
    if isinstance(value, dict):
        return {k: _stored(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_stored(v) for v in value]
    return value


PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


async def _emit(context: CapabilityContext, query: FaqQuery) -> Completed:
    [value] = context.ports["values"]
    context.events.emit("adversarial.value", {"v": value})
    return Completed(output=FaqAnswer(answer="-"), text="Noted.")


EMITTER = define_capability(
    id="adversarial.emit",
    version="1.0.0",
    description="Emit a value.",
    input=FaqQuery,
    output=FaqAnswer,
    execute=_emit,
)


@PROPERTY
@given(ADVERSARIAL)
def test_event_data_is_refused_at_emit_or_reads_back_equal(value: Any) -> None:
    async def scenario() -> None:
        durability = MemoryDurability()
        world = make_world(durability, agent=support_agent([EMITTER]), ports={"values": [value]})
        world.say("go", [{"capability": "adversarial.emit", "input": {"topic": "x"}}])
        result = await world.run("turn-1", "go")
        outbox = [s.event for s in await durability.read_outbox(thread_id="t1")]
        stored = [e.data for e in outbox if e.type == "adversarial.value"]
        [step] = result.response.steps
        if step.status == "failed":
            # Refused at emit: the step failed (not retryable), nothing of the event was kept.
            assert step.retryable is False and stored == []
            [failed] = [e for e in outbox if e.type == "step.failed"]
            error = failed.data["error"]
            assert isinstance(error, dict)
            assert error["type"] == "intention_kernel.contracts.errors.SerializationError"
            assert ErrorCode(str(error["code"])) in ErrorCode  # a stable code, never the message
            return
        assert step.status == "completed"
        assert stored == [{"v": _stored(value)}]

    asyncio.run(scenario())


class Anything(BaseModel):
    v: Any


async def _echo(context: CapabilityContext, query: Anything) -> Completed:
    context.ports["seen"].append(query.v)
    return Completed(output=FaqAnswer(answer="-"), text="Echoed.")


ECHO = define_capability(
    id="adversarial.echo",
    version="1.0.0",
    description="Echo a value.",
    input=Anything,
    output=FaqAnswer,
    execute=_echo,
)


@PROPERTY
@given(ADVERSARIAL)
def test_a_proposed_input_is_refused_before_it_runs_or_reads_back_equal(value: Any) -> None:
    async def scenario() -> None:
        durability = MemoryDurability()
        seen: list[Any] = []
        world = make_world(durability, agent=support_agent([ECHO]), ports={"seen": seen})
        intentions: list[Any] = [{"capability": "adversarial.echo", "input": {"v": value}}]
        world.say("go", intentions)
        world.gateway.set("repair", {"intentions": intentions, "answer": None, "reply": None})
        result = await world.run("turn-1", "go")  # the model's mistakes never raise
        if not seen:
            assert result.response.kind == "clarification"
            assert result.checkpoint.agenda == []
            return
        [ran] = seen
        started = [
            s.event.data["input"]
            for s in await durability.read_outbox(thread_id="t1")
            if s.event.type == "step.started"
        ]
        assert started == [{"v": _stored(ran)}] and ran == _stored(value)

    asyncio.run(scenario())


@PROPERTY
@given(actor=st.one_of(TEXT, st.text(min_size=300, max_size=1200), ADVERSARIAL), note=ADVERSARIAL)
def test_the_request_is_refused_before_anything_runs_or_reads_back_equal(
    actor: Any, note: Any
) -> None:
    async def scenario() -> None:
        durability = MemoryDurability()
        payments = Payments()
        world = make_world(
            durability, agent=support_agent([CHARGE, REFUND]), ports={"payments": payments}
        )
        world.say("charge 42", CHARGE_42)
        proposed = await world.run("turn-1", "charge 42")
        selection = {**accept(proposed), "note": note}
        try:
            done = await world.run("turn-2", "", selection=selection, host_context={"actor": actor})
        except InvalidInputError:
            assert payments.calls == []
            stored = await durability.load_checkpoint("t1")
            assert stored is not None and stored.revision == 1
            return
        assert payments.calls == ["payments.charge:order:42"]
        decisions = done.checkpoint.metadata["decisions"]
        assert isinstance(decisions, list) and isinstance(decisions[0], dict)
        assert decisions[0]["actor"] == (actor if isinstance(actor, str) else None)
        [started] = [
            s.event.data
            for s in await durability.read_outbox(turn_id="turn-2")
            if s.event.type == "turn.started"
        ]
        assert started["selection"] == {**accept(proposed), "note": _stored(note)}

    asyncio.run(scenario())
