"""External completions: a capability parks a step (``AwaitingExternal``) after starting the
job with a write; ``complete_external`` resumes it in a new turn (the write replays, the
provider is called once); a duplicate completion is the same request; a late or unknown one is
refused with nothing written; at its timeout a turn stops waiting. On every store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from intention_kernel.contracts import DurabilityStore
from intention_kernel.contracts.errors import ErrorCode, InvalidInputError, TurnConflictError
from intention_kernel.contracts.inbox import RequestState
from intention_kernel.kernel import (
    AwaitingExternal,
    CapabilityContext,
    Completed,
    TurnResult,
    define_capability,
)

from .support import Clock, World, make_world, support_agent
from .writes import Payments, Receipt

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


class Settle(BaseModel):
    order_id: str


async def _settle(context: CapabilityContext, job: Settle) -> AwaitingExternal | Completed:
    """Starts a payment (a write), waits for the bank to say it settled, then reports it."""
    payments: Payments = context.ports["payments"]
    effect = await context.run_effect(  # after a completion: replayed from the ledger
        f"settle:{job.order_id}",
        lambda authority: payments.charge(authority, job.order_id, 5),
    )
    value = effect.value
    assert isinstance(value, dict)
    done = context.external
    if done is None:
        return AwaitingExternal(
            key=f"bank-{job.order_id}",
            timeout=HOUR,
            payload={"charge": value["charge_id"]},
            text="The payment is on its way to the bank.",
        )
    assert isinstance(done.result, dict)
    return Completed(
        output=Receipt(charge_id=str(done.payload["charge"]), amount=5),
        text=f"Payment {done.payload['charge']} settled: {done.result['status']}.",
    )


SETTLE = define_capability(
    id="payments.settle",
    version="1.0.0",
    description="Settle an order's payment with the bank.",
    input=Settle,
    output=Receipt,
    effect="write",
    confirmation="required",
    execute=_settle,
)


def _world(durability: DurabilityStore) -> tuple[World, Payments, Clock]:
    payments, clock = Payments(), Clock(T0)
    world = make_world(
        durability, agent=support_agent([SETTLE]), ports={"payments": payments}, clock=clock
    )
    world.say("settle 42", [{"capability": "payments.settle", "input": {"order_id": "42"}}])
    world.say("yes", [], answer="yes")
    return world, payments, clock


async def _park(world: World) -> TurnResult:
    """Ask to settle, consent: the payment starts and the step parks."""
    await world.run("turn-0", "settle 42")
    parked: TurnResult = await world.run("turn-1", "yes")
    return parked


async def _run_request(world: World, thread_id: str, turn_id: str) -> TurnResult:
    """The turn a worker would run for the request (a direct run of the same turn)."""
    request = await world.durability.inbox.get(thread_id, turn_id)  # type: ignore[attr-defined]
    assert request is not None
    return await world.agent.run(
        thread_id=thread_id, turn_id=turn_id, text=request.text, selection=request.selection
    )


async def test_a_parked_step_is_resumed_by_its_completion_and_writes_once(
    durability: DurabilityStore,
) -> None:
    world, payments, clock = _world(durability)
    parked = await _park(world)
    assert parked.response.text == "The payment is on its way to the bank."
    [item] = parked.checkpoint.agenda
    assert (item.status, item.data["external_key"]) == ("awaiting_external", "bank-42")
    assert item.data["expires_at"] == (T0 + HOUR).isoformat()
    assert payments.calls == ["payments.settle:settle:42"]
    rows: Any = getattr(durability, "schedules")  # noqa: B009 - the store's timers
    [timer] = await rows.due_timers(T0 + HOUR)
    assert timer.turn_id == "bank-42@timeout"

    clock.now = T0 + timedelta(minutes=20)
    request = await world.agent.complete_external(
        thread_id="t1", key="bank-42", result={"status": "settled"}
    )
    assert (request.turn_id, request.state) == ("bank-42@completed", RequestState.PENDING)
    calls = world.gateway.count("interpret")
    done = await _run_request(world, "t1", "bank-42@completed")
    assert world.gateway.count("interpret") == calls  # nobody's words to interpret
    assert "Payment ch-1 settled: settled." in done.response.text
    assert done.checkpoint.agenda == []
    assert payments.calls == ["payments.settle:settle:42"]  # the write replayed
    assert "external.completed" in world.collector.types("bank-42@completed")

    again = await world.agent.complete_external(
        thread_id="t1", key="bank-42", result={"status": "settled"}
    )
    assert (again.turn_id, again.state) == ("bank-42@completed", RequestState.DONE)
    with pytest.raises(TurnConflictError) as reused:
        await world.agent.complete_external(
            thread_id="t1", key="bank-42", result={"status": "refused"}
        )
    assert reused.value.code == ErrorCode.TURN_ID_REUSED

    clock.now = T0 + HOUR  # its timer: the step no longer waits, so it is not submitted
    scheduler = world.agent.scheduler(clock=clock)
    await scheduler.tick()
    assert scheduler.fired == 1
    assert await durability.inbox.get("t1", "bank-42@timeout") is None  # type: ignore[attr-defined]


async def test_at_its_timeout_a_turn_stops_waiting_and_a_late_completion_is_refused(
    durability: DurabilityStore,
) -> None:
    world, payments, clock = _world(durability)
    await _park(world)
    clock.now = T0 + HOUR
    with pytest.raises(InvalidInputError) as late:
        await world.agent.complete_external(thread_id="t1", key="bank-42", result={"s": 1})
    assert late.value.code == ErrorCode.EXTERNAL_EXPIRED
    inbox: Any = getattr(durability, "inbox")  # noqa: B009
    assert await inbox.list_requests(thread_id="t1") == []  # nothing written
    scheduler = world.agent.scheduler(clock=clock)
    await scheduler.tick()
    stopped = await _run_request(world, "t1", "bank-42@timeout")
    assert stopped.response.text.startswith(
        "Settle an order's payment with the bank did not complete in time"
    )
    assert stopped.checkpoint.agenda == []
    decisions = stopped.checkpoint.metadata["decisions"]
    assert isinstance(decisions, list) and isinstance(decisions[-1], dict)
    last = decisions[-1]
    assert (last["decision"], last["external_key"], last["turn_id"]) == (
        "timed_out",
        "bank-42",
        "bank-42@timeout",
    )
    replay = await _run_request(world, "t1", "bank-42@timeout")
    assert replay.replayed  # the timeout turn runs once
    await scheduler.tick()
    assert scheduler.fired == 1
    assert payments.calls == ["payments.settle:settle:42"]


@pytest.mark.parametrize(
    ("key", "result", "code"),
    [
        ("bank-7", {"s": 1}, ErrorCode.EXTERNAL_UNKNOWN),
        (" ", {"s": 1}, ErrorCode.INVALID_ID),
        ("x" * 300, {"s": 1}, ErrorCode.INVALID_ID),
        ("bank-42", {"s": float("nan")}, ErrorCode.NON_FINITE_NUMBER),
        ("bank-42", {"s": object()}, ErrorCode.NOT_SERIALIZABLE),
    ],
)
async def test_a_bad_completion_is_refused_and_nothing_is_written(
    durability: DurabilityStore, key: str, result: Any, code: ErrorCode
) -> None:
    world, _, _ = _world(durability)
    await _park(world)
    with pytest.raises(InvalidInputError) as refused:
        await world.agent.complete_external(thread_id="t1", key=key, result=result)
    assert refused.value.code == code
    inbox: Any = getattr(durability, "inbox")  # noqa: B009
    assert await inbox.list_requests(thread_id="t1") == []


async def test_a_bad_wait_fails_its_step(durability: DurabilityStore) -> None:
    async def bad(context: CapabilityContext, job: Settle) -> AwaitingExternal:
        return AwaitingExternal(key="has@at", timeout=60)

    cap = define_capability(
        id="jobs.bad",
        version="1.0.0",
        description="A bad wait.",
        input=Settle,
        output=Receipt,
        execute=bad,
    )
    world = make_world(durability, agent=support_agent([cap]))
    world.say("go", [{"capability": "jobs.bad", "input": {"order_id": "1"}}])
    failed = await world.run("turn-1", "go")
    [step] = failed.response.steps
    assert step.status == "failed" and "invalid key" in str(step.reason)
    assert failed.checkpoint.agenda == []
