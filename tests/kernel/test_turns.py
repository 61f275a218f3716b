"""End-to-end conversations through the kernel, on every durability adapter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from intention_kernel.contracts import (
    CheckpointIncompatibleError,
    DurabilityStore,
    ErrorCode,
    KernelCheckpoint,
    TurnConflictError,
    TurnTimeoutError,
)
from intention_kernel.kernel import KernelLimits

from .support import FaqAnswer, Intentions, World, make_world, support_agent

LOOKUP: Intentions = [{"capability": "orders.lookup", "input": {"order_id": "42"}}]
TRACK: Intentions = [{"capability": "shipping.track", "input": {}}]


async def test_read_answered_with_evidence_then_followup_uses_the_fact(world: World) -> None:
    world.say("where is order 42?", LOOKUP)
    first = await world.run("turn-1", "where is order 42?")
    assert not first.replayed
    assert first.response.kind == "answer"
    assert first.response.text == "Order 42 has shipped."
    [evidence] = first.response.evidence
    assert first.response.citations == [evidence.id]
    assert evidence.capability_id == "orders.lookup" and evidence.source == "orders-db"
    [order] = first.checkpoint.facts
    assert (order.type, order.version, order.revision) == ("order", 1, 1)
    assert order.evidence == [evidence]
    assert first.checkpoint.revision == 1
    assert first.checkpoint.agent_fingerprint == world.agent.fingerprint

    world.say("and how is it shipped?", TRACK)
    second = await world.run("turn-2", "and how is it shipped?")
    assert second.response.text == "Order 42 travels with PostNL."
    assert second.checkpoint.revision == 2
    facts = {f.id: f for f in second.checkpoint.facts}
    assert facts["shipment@1"].derived_from == ["order@1"]
    assert [m.role for m in second.checkpoint.messages] == ["user", "assistant"] * 2
    stored = await world.durability.load_checkpoint("t1")
    assert stored == second.checkpoint

    # Asking again replaces the fact with its next revision.
    world.say("order 42 again", LOOKUP)
    third = await world.run("turn-3", "order 42 again")
    order3 = next(f for f in third.checkpoint.facts if f.id == "order@1")
    assert order3.revision == 2 and order3.turn_id == "turn-3"


async def test_two_independent_reads_run_concurrently(world: World) -> None:
    # Each read waits at a two-party barrier: run one after the other, both would time out.
    world.shop.barrier = asyncio.Barrier(2)
    world.say(
        "hours and returns?",
        [
            {"capability": "store.hours", "input": {}},
            {"capability": "faq.search", "input": {"topic": "returns"}},
        ],
    )
    result = await world.run("turn-1", "hours and returns?")
    assert world.shop.max_inside == 2
    assert [s.status for s in result.response.steps] == ["completed", "completed"]
    types = world.collector.types("turn-1")
    started = [i for i, t in enumerate(types) if t == "step.started"]
    completed = [i for i, t in enumerate(types) if t == "step.completed"]
    assert len(started) == 2 and max(started) < min(completed)


async def test_dependent_read_waits_for_a_fact_from_the_same_turn(world: World) -> None:
    # The consumer is listed first; the planner still runs the provider first.
    world.say("track order 42", TRACK + LOOKUP)
    world.shop.delay = 0.01
    result = await world.run("turn-1", "track order 42")
    assert [s.status for s in result.response.steps] == ["completed", "completed"]
    plan = world.collector.of_type("plan.created")[0]
    steps = plan.data["steps"]
    assert isinstance(steps, list)
    assert [s["capability_id"] for s in steps if isinstance(s, dict)] == [
        "orders.lookup",
        "shipping.track",
    ]
    facts = {f.id: f for f in result.checkpoint.facts}
    assert facts["shipment@1"].derived_from == ["order@1"]
    assert world.shop.max_inside == 1


async def test_missing_prerequisite_is_held_not_run(world: World) -> None:
    world.say("track my parcel", TRACK)
    result = await world.run("turn-1", "track my parcel")
    assert world.shop.total() == 0
    [item] = result.checkpoint.agenda
    assert item.status == "waiting_for_fact" and item.data["missing"] == ["order@1"]


async def test_replay_runs_nothing(world: World) -> None:
    world.say("where is order 42?", LOOKUP)
    first = await world.run("turn-1", "where is order 42?")
    model_calls, capability_calls = world.gateway.count(), world.shop.total()
    events = len(world.collector.events)
    again = await world.run("turn-1", "where is order 42?")
    assert again.replayed
    assert world.gateway.count() == model_calls
    assert world.shop.total() == capability_calls
    assert len(world.collector.events) == events
    assert again.response == first.response
    assert again.checkpoint == first.checkpoint
    assert again.trace_id == first.trace_id


async def test_reused_turn_id_with_another_request_is_refused(world: World) -> None:
    world.say("where is order 42?", LOOKUP)
    await world.run("turn-1", "where is order 42?")
    with pytest.raises(TurnConflictError) as info:
        await world.run("turn-1", "something else entirely")
    assert info.value.code == ErrorCode.TURN_ID_REUSED


async def test_a_capability_that_raises_fails_its_step_and_the_turn_commits(world: World) -> None:
    world.say("where is order 42?", LOOKUP)
    world.shop.crash_next.add("orders.lookup")
    crashed = await world.run("turn-1", "where is order 42?")
    [step] = crashed.response.steps
    assert step.status == "failed" and step.retryable is False
    assert crashed.response.kind == "fallback" and "crashed" not in crashed.response.text
    assert crashed.checkpoint.revision == 1 and crashed.checkpoint.facts == []
    assert await world.durability.get_turn("t1", "turn-1") is not None
    # Delivered again, the turn replays its committed answer; a new turn runs again.
    assert (await world.run("turn-1", "where is order 42?")).replayed
    retry = await world.run("turn-2", "where is order 42?")
    assert retry.checkpoint.revision == 2 and [f.type for f in retry.checkpoint.facts] == ["order"]
    assert world.shop.calls["orders.lookup"] == 2


async def test_a_crash_in_one_of_two_concurrent_steps_fails_only_that_step(world: World) -> None:
    world.say(
        "hours and returns?",
        [
            {"capability": "store.hours", "input": {}},
            {"capability": "faq.search", "input": {"topic": "returns"}},
        ],
    )
    world.shop.crash_next.add("faq.search")
    result = await world.run("turn-1", "hours and returns?")
    assert [(s.capability_id, s.status) for s in result.response.steps] == [
        ("store.hours", "completed"),
        ("faq.search", "failed"),
    ]
    assert "We are open 9 to 5." in result.response.text and result.response.kind == "fallback"


async def test_invalid_model_output_gets_one_repair_then_a_clean_clarification(
    world: World,
) -> None:
    world.say("where is my order?", [{"capability": "orders.lookup", "input": {}}])
    world.gateway.set("repair", {"intentions": [{"capability": "orders.lookup", "input": {}}]})
    result = await world.run("turn-1", "where is my order?")
    assert world.gateway.count("interpret") == 1
    assert world.gateway.count("repair") == 1
    assert world.gateway.count("compose") == 0
    assert world.shop.total() == 0
    assert result.response.kind == "clarification"
    assert "order_id" in result.response.text
    assert result.checkpoint.revision == 1
    repair = next(c for c in world.gateway.calls if c.task == "repair")
    assert repair.input["problems"]


async def test_malformed_interpretation_is_repaired(world: World) -> None:
    world.gateway.set("interpret", "this is not an interpretation")
    world.gateway.set("repair", {"intentions": list[Any](LOOKUP)})
    result = await world.run("turn-1", "where is order 42?")
    assert result.response.text == "Order 42 has shipped."
    assert world.gateway.count("repair") == 1


async def test_unknown_capability_is_clarified(world: World) -> None:
    world.gateway.set("interpret", {"intentions": [{"capability": "rm.rf", "input": {}}]})
    world.gateway.set("repair", {"intentions": [{"capability": "rm.rf", "input": {}}]})
    result = await world.run("turn-1", "delete everything")
    assert result.response.kind == "clarification"
    assert world.shop.total() == 0


async def test_bad_citations_get_one_recomposition_then_a_safe_fallback(world: World) -> None:
    world.say("where is order 42?", LOOKUP)
    world.gateway.set("compose", {"text": "Made up.", "citations": ["ev_invented"]})
    result = await world.run("turn-1", "where is order 42?")
    assert world.gateway.count("compose") == 2
    second = [c for c in world.gateway.calls if c.task == "compose"][1]
    assert second.input["problems"]
    assert result.response.kind == "fallback"
    assert result.response.text == "Order 42 has shipped."
    assert result.response.citations == [e.id for e in result.response.evidence]


async def test_recomposition_that_succeeds_is_used(world: World) -> None:
    world.say("where is order 42?", LOOKUP)
    world.gateway.set("compose", [{"text": "x", "citations": ["nope"]}, {"text": "Shipped."}])
    result = await world.run("turn-1", "where is order 42?")
    assert result.response.kind == "answer" and result.response.text == "Shipped."


async def test_fingerprint_change_refused_until_declared_compatible(
    durability: DurabilityStore,
) -> None:
    old = make_world(durability)
    old.say("where is order 42?", LOOKUP)
    await old.run("turn-1", "where is order 42?")

    from intention_kernel.kernel import Completed, define_capability

    async def _noop(context: object, query: object) -> Completed:
        return Completed(output=FaqAnswer(answer="-"))

    extra = define_capability(
        id="store.phone",
        version="1.0.0",
        description="Give the phone number.",
        input=FaqAnswer,
        output=FaqAnswer,
        execute=_noop,
    )
    new = make_world(durability, agent=support_agent([extra]))
    assert new.agent.fingerprint != old.agent.fingerprint
    new.say("where is order 42 now?", LOOKUP)
    with pytest.raises(CheckpointIncompatibleError) as info:
        await new.run("turn-2", "where is order 42 now?")
    assert info.value.context["stored_fingerprint"] == old.agent.fingerprint
    assert new.gateway.count() == 0 and new.shop.total() == 0
    assert (await durability.load_checkpoint("t1")).revision == 1  # type: ignore[union-attr]

    compatible = new.kernel.compile(support_agent([extra]), compatible_with=[old.agent.fingerprint])
    result = await compatible.run(thread_id="t1", turn_id="turn-2", text="where is order 42 now?")
    assert result.checkpoint.revision == 2
    assert result.checkpoint.agent_fingerprint == new.agent.fingerprint


async def test_declared_migration_rewrites_the_old_checkpoint(durability: DurabilityStore) -> None:
    old = make_world(durability)
    old.say("where is order 42?", LOOKUP)
    await old.run("turn-1", "where is order 42?")
    changed = support_agent(version="2.0.0")
    seen: list[int] = []

    def migrate(checkpoint: KernelCheckpoint) -> KernelCheckpoint:
        seen.append(checkpoint.revision)
        return checkpoint.model_copy(update={"facts": []})

    new = make_world(durability, agent=changed)
    migrated = new.kernel.compile(changed, migrations={old.agent.fingerprint: migrate})
    new.say("track it", TRACK)
    result = await migrated.run(thread_id="t1", turn_id="turn-2", text="track it")
    assert seen == [1]
    assert result.checkpoint.agenda[0].status == "waiting_for_fact"  # the order fact was dropped


async def test_newer_schema_version_is_refused(durability: DurabilityStore, world: World) -> None:
    from intention_kernel.kernel._compat import Compatibility, admit_checkpoint

    checkpoint = KernelCheckpoint(revision=3, agent_fingerprint="x", schema_version=99)
    with pytest.raises(CheckpointIncompatibleError):
        admit_checkpoint(checkpoint, Compatibility("x", frozenset({"x"})))


async def test_messages_are_bounded_with_an_omitted_count(durability: DurabilityStore) -> None:
    world = make_world(durability, limits=KernelLimits(max_messages=4, context_messages=2))
    for n in range(5):
        await world.run(f"turn-{n}", f"hello {n}")
    checkpoint = await durability.load_checkpoint("t1")
    assert checkpoint is not None
    assert [m.text for m in checkpoint.messages if m.role == "user"] == ["hello 3", "hello 4"]
    assert checkpoint.omitted_messages == 6
    last = [c for c in world.gateway.calls if c.task == "interpret"][-1]
    context = last.input["context"]
    assert isinstance(context, dict)
    assert context["omitted_messages"] == 6  # 8 stored before turn 4, 2 shown


async def test_turn_timeout_commits_nothing(world: World) -> None:
    world.say("where is order 42?", LOOKUP)
    world.shop.delay = 5.0
    with pytest.raises(TurnTimeoutError):
        await world.run("turn-1", "where is order 42?", timeout=0.05)
    assert await world.durability.load_checkpoint("t1") is None


async def test_step_timeout_is_a_handled_failure(durability: DurabilityStore) -> None:
    world = make_world(durability, limits=KernelLimits(step_timeout=0.02))
    world.say("where is order 42?", LOOKUP)
    world.shop.delay = 5.0
    result = await world.run("turn-1", "where is order 42?")
    assert [s.status for s in result.response.steps] == ["failed"]
    assert result.checkpoint.facts == []


async def test_threads_are_independent(world: World) -> None:
    world.say("where is order 42?", LOOKUP)
    a, b = await asyncio.gather(
        world.run("turn-1", "where is order 42?", thread_id="a"),
        world.run("turn-1", "where is order 42?", thread_id="b"),
    )
    assert a.checkpoint.revision == b.checkpoint.revision == 1
    assert a.trace_id != b.trace_id


async def test_a_failed_provider_skips_its_dependent_step(durability: DurabilityStore) -> None:
    from intention_kernel.kernel import Failed, define_capability

    from .support import OrderInfo, OrderQuery, capabilities

    async def missing(context: Any, query: OrderQuery) -> Failed:
        return Failed("That order does not exist.")

    caps = [c for c in capabilities() if c.id != "orders.lookup"]
    caps.append(
        define_capability(
            id="orders.lookup",
            version="1.0.0",
            description="Look up an order by id.",
            input=OrderQuery,
            output=OrderInfo,
            provides=["order@1"],
            execute=missing,
        )
    )
    world = make_world(durability, agent=support_agent(capabilities=caps))
    world.say("track order 7", LOOKUP + TRACK)
    result = await world.run("turn-1", "track order 7")
    assert [s.status for s in result.response.steps] == ["failed", "skipped"]
    assert world.shop.total() == 0
    assert "That order does not exist." in world.gateway.calls[-1].model_dump_json()
    assert "step.skipped" in world.collector.types("turn-1")
    assert result.checkpoint.facts == []


async def test_checkpoint_size_stops_growing_with_thread_length(
    durability: DurabilityStore,
) -> None:
    world = make_world(durability, limits=KernelLimits(max_messages=6, max_receipts=3))
    world.say("where is order 42?", LOOKUP)
    sizes: list[int] = []
    for n in range(30):
        result = await world.run(f"turn-{n:03d}", "where is order 42?")
        sizes.append(
            len(result.checkpoint.model_dump_json(exclude={"messages": {"__all__": {"at"}}}))
        )
    assert result.checkpoint.omitted_messages == 60 - 6
    assert max(sizes[10:]) - min(sizes[10:]) < 16  # only the turn ids' digits may vary


async def test_declared_invalidation_drops_the_fact(durability: DurabilityStore) -> None:
    from intention_kernel.kernel import Completed, define_capability

    from .support import TrackQuery

    async def forget(context: Any, query: TrackQuery) -> Completed:
        return Completed(output=FaqAnswer(answer="forgotten"), text="I forgot the order.")

    cap = define_capability(
        id="orders.forget",
        version="1.0.0",
        description="Forget the current order.",
        input=TrackQuery,
        output=FaqAnswer,
        invalidates=["order@1"],
        execute=forget,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("where is order 42?", LOOKUP)
    first = await world.run("turn-1", "where is order 42?")
    assert [f.id for f in first.checkpoint.facts] == ["order@1"]
    world.say("forget it", [{"capability": "orders.forget", "input": {}}])
    second = await world.run("turn-2", "forget it")
    assert second.checkpoint.facts == []


async def test_needs_input_opens_an_interaction(durability: DurabilityStore) -> None:
    from intention_kernel.kernel import NeedsInput, define_capability

    from .support import TrackQuery

    async def ask(context: Any, query: TrackQuery) -> NeedsInput:
        return NeedsInput("Which store do you mean?", fields=("store",))

    cap = define_capability(
        id="store.address",
        version="1.0.0",
        description="Give a store's address.",
        input=TrackQuery,
        output=FaqAnswer,
        execute=ask,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("address?", [{"capability": "store.address", "input": {}}])
    result = await world.run("turn-1", "address?")
    interaction = result.checkpoint.interaction
    assert interaction is not None and interaction.kind == "input"
    assert interaction.prompt == "Which store do you mean?"
    assert result.response.interaction == interaction
    assert "Which store do you mean?" in result.response.text
    [item] = result.checkpoint.agenda
    assert item.status == "needs_input" and item.data["missing"] == ["store"]


async def test_a_fact_that_is_not_json_is_a_failed_step(durability: DurabilityStore) -> None:
    from intention_kernel.kernel import Completed, ProducedFact, define_capability

    from .support import TrackQuery

    async def bad(context: Any, query: TrackQuery) -> Completed:
        return Completed(
            output=FaqAnswer(answer="-"), facts=(ProducedFact("note@1", float("nan")),)
        )

    cap = define_capability(
        id="notes.bad",
        version="1.0.0",
        description="Write a bad note.",
        input=TrackQuery,
        output=FaqAnswer,
        provides=["note@1"],
        execute=bad,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("note", [{"capability": "notes.bad", "input": {}}])
    result = await world.run("turn-1", "note")
    assert [s.status for s in result.response.steps] == ["failed"]
    assert result.checkpoint.facts == []
