"""Deterministic runs: with the same clock, id generator and scripted model, a recorded
conversation replays to the byte (checkpoints, responses and events)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from intention_kernel.contracts import ConfigurationError, DurabilityStore
from intention_kernel.kernel import Kernel
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

from .conftest import DURABILITY_FACTORIES, DurabilityFactory
from .support import make_world, support_agent
from .writes import CHARGE, CHARGE_42, LOOKUP_42, Payments

START = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)


def stepping_clock() -> Callable[[], datetime]:
    """A clock that moves one millisecond each time it is read."""
    ticks = [0]

    def now() -> datetime:
        ticks[0] += 1
        return START + timedelta(milliseconds=ticks[0])

    return now


def counting_ids() -> Callable[[str], str]:
    counts: dict[str, int] = {}

    def new(prefix: str) -> str:
        counts[prefix] = counts.get(prefix, 0) + 1
        return f"{prefix}_{counts[prefix]:06d}"

    return new


async def record(store: DurabilityStore) -> tuple[list[str], list[str]]:
    """Run one conversation; its checkpoints and responses, and its outbox events, as JSON."""
    world = make_world(store, agent=support_agent([CHARGE]), ports={"payments": Payments()})
    kernel = Kernel(
        durability=store,
        model=world.gateway,
        ports=world.kernel.ports,
        clock=stepping_clock(),
        ids=counting_ids(),
    )
    agent = kernel.compile(support_agent([CHARGE]))
    world.say("where is order 42?", LOOKUP_42)
    world.say("charge 42", CHARGE_42)
    world.say("no", [], answer="no")
    world.say(
        "hours and returns?",
        [
            {"capability": "store.hours", "input": {}},
            {"capability": "faq.search", "input": {"topic": "returns"}},
        ],
    )
    results = []
    for n, text in enumerate(["where is order 42?", "charge 42", "no", "hours and returns?"]):
        result = await agent.run(thread_id="t1", turn_id=f"turn-{n}", text=text)
        results.append(result.checkpoint.model_dump_json())
        results.append(result.response.model_dump_json())
        results.append(result.trace_id)
    events = [s.event.model_dump_json() for s in await store.read_outbox(thread_id="t1")]
    return results, events


@pytest.mark.parametrize(
    "factory",
    [f for name, f in DURABILITY_FACTORIES if name != "postgres"],
    ids=[name for name, _ in DURABILITY_FACTORIES if name != "postgres"],
)
async def test_the_same_clock_and_ids_replay_a_conversation_to_the_byte(
    factory: DurabilityFactory, tmp_path: Path
) -> None:
    runs = []
    for attempt in ("a", "b"):
        (tmp_path / attempt).mkdir()
        async with factory(tmp_path / attempt) as store:
            runs.append(await record(store))
    (first, first_events), (second, second_events) = runs
    assert first == second
    assert first_events == second_events
    assert len(first_events) > 20
    assert '"occurred_at":"2026-05-04T12:00:00.001000Z"' in first_events[0]
    assert '"id":"evt_trace_000001.0"' in first_events[0]
    assert '"answered_at":"2026-05-04T12:00:00' in "".join(first)  # the declined consent
    assert "ev_000001" in first[0]  # evidence ids come from the id generator


async def test_the_clock_and_ids_must_be_callable() -> None:
    with pytest.raises(ConfigurationError) as info:
        Kernel(
            durability=MemoryDurability(),
            model=ScriptedModelGateway(),
            clock=START,  # type: ignore[arg-type]
            ids="ev-1",  # type: ignore[arg-type]
        )
    assert info.value.context["problems"] == ["clock must be callable", "ids must be callable"]
