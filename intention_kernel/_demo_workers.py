"""The demo's worker processes, killed with ``kill -9`` on purpose.

Step 8: a turn run directly in another process, killed mid-turn, delivered again by its caller.
Step 9: a turn submitted to the inbox, its worker process killed after the booking was made,
and another worker finishing it on its own: the booking reached the provider once, no caller
was involved.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from ._demo_parts import ACTOR, TENANT, Conversation, check, line, note, open_store, travel_desk
from .contracts import DurabilityStore, ReceiptStatus
from .contracts.gateway import ModelRequest, ModelResponse
from .contracts.inbox import RequestState
from .examples.travel_desk import FakeHotelProvider, scripted_model
from .kernel import TurnCompleted

__all__ = ["MID_TURN", "finish_submitted_turn", "kill_mid_turn", "run_inbox_worker", "run_worker"]

MID_TURN = "mid-turn"
"""What a worker process prints once its turn is running (the parent then kills it)."""
BOOKED = "booked"
"""What the inbox worker process prints once the provider made the booking."""


class _Stalling:
    """The worker's model: says it is in the middle of the turn, then never answers."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        print(MID_TURN, flush=True)
        await asyncio.sleep(3600)
        raise AssertionError("the demo kills this process first")


async def run_worker(directory: Path, thread: str, turn_id: str, text: str) -> None:
    """Another process on the same store, running one turn until it is killed."""
    store, _ = await open_store(directory)
    agent, _ = travel_desk(store, _Stalling())
    await agent.run(
        thread_id=thread,
        turn_id=turn_id,
        text=text,
        host_context={"actor": ACTOR, "tenant": TENANT},
    )


async def _kill_after(*arguments: str, lines: int) -> tuple[int, list[str]]:
    """Start a demo worker process (``python -m intention_kernel.demo`` with ``arguments``),
    read the first ``lines`` it prints, then ``kill -9`` it: no cleanup code runs in it.
    Returns its pid and what it printed."""
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "intention_kernel.demo", *arguments, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert worker.stdout is not None
        said = [
            (await asyncio.wait_for(worker.stdout.readline(), 30)).decode().strip()
            for _ in range(lines)
        ]
        os.kill(worker.pid, signal.SIGKILL)
        await asyncio.wait_for(worker.wait(), 30)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    return worker.pid, said


async def kill_mid_turn(talk: Conversation, store: DurabilityStore, directory: Path) -> None:
    """Promise 3: a worker process killed with SIGKILL mid-turn loses nothing committed, leaves
    nothing half-written, and the same turn delivered again runs once."""
    thread = talk.thread
    before = await store.load_checkpoint(thread)
    committed = len(await store.list_turns(thread, limit=1000))
    check(before is not None, "the thread has committed turns")
    assert before is not None
    talk.turns += 1
    turn_id, text = f"turn-{talk.turns}", "Is breakfast included?"
    line("user", f"{text}  (this turn runs in a worker process)")
    pid, said = await _kill_after("--worker", str(directory), thread, turn_id, lines=1)
    check(said == [MID_TURN], "the worker started the turn")
    note(f"worker pid {pid} killed with SIGKILL while its turn was running")
    note("(it was inside the model call, holding the thread's lease)")
    after = await store.load_checkpoint(thread)
    kept = len(await store.list_turns(thread, limit=1000))
    check(
        after is not None and after.revision == before.revision and kept == committed,
        "the killed turn left nothing half-written",
    )
    note(f"the thread is as it was: revision {before.revision}, {kept} turns committed")
    again = await talk.turn(turn_id, text, show=False)
    note(f"{turn_id} delivered again, here (the kernel released the dead worker's lease):")
    line("agent", again.response.text)
    check(again.checkpoint.revision == before.revision + 1, "the turn ran again, once")
    note(f"committed once, revision {before.revision + 1}: nothing committed was lost")


class _Announcing:
    """The inbox worker's provider: the demo's fake, saying when it made the booking."""

    def __init__(self, provider: Any) -> None:
        self._provider = provider

    async def book(self, quote: dict[str, Any], *, idempotency_key: str) -> dict[str, Any]:
        booking: dict[str, Any] = await self._provider.book(quote, idempotency_key=idempotency_key)
        print(BOOKED, flush=True)
        return booking


class _ComposeStalls:
    """The inbox worker's model: the scripted one, stalling once it composes the answer (the
    booking is made and recorded by then)."""

    def __init__(self) -> None:
        self._model = scripted_model()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.task == "compose":
            print(MID_TURN, flush=True)
            await asyncio.sleep(3600)
        return await self._model.complete(request)


async def run_inbox_worker(directory: Path) -> None:
    """Another process on the same store, running submitted turns until it is killed."""
    store, _ = await open_store(directory)
    agent, _ = travel_desk(store, _ComposeStalls(), _Announcing(FakeHotelProvider()))
    await agent.work(claim_ttl=1.0, poll_interval=0.05)


async def finish_submitted_turn(
    talk: Conversation, store: DurabilityStore, directory: Path
) -> None:
    """A submitted turn finishes on its own: the first worker dies after the booking, the
    second one finishes the turn from the ledger (no second provider call), nobody retries."""
    calls_before = talk.provider.total_calls()
    await talk.say("Find me a hotel in Lisbon for 3 nights")
    await talk.say("How much is Tejo Suites?")
    proposed = await talk.say("Book it")
    interaction = proposed.checkpoint.interaction
    check(interaction is not None, "the booking waits for a confirmation")
    assert interaction is not None
    talk.turns += 1
    turn_id = f"turn-{talk.turns}"
    selection: dict[str, JsonValue] = {"interaction_id": interaction.id, "option": "yes"}
    line("user", f'[presses "yes" on {interaction.id}; the app submits it and moves on]')
    request = await talk.agent.submit(
        thread_id=talk.thread,
        turn_id=turn_id,
        text="",
        selection=selection,
        host_context={"actor": ACTOR, "tenant": TENANT},
    )
    note(f"request {turn_id}: {request.state} at position {request.position}")
    pid, said = await _kill_after("--inbox-worker", str(directory), lines=2)
    check(said == [BOOKED, MID_TURN], "the worker booked, then composed the answer")
    note(f"worker pid {pid} made the booking, then was killed with SIGKILL")
    note("a second worker (here) claims the request once the dead worker's claim expires")
    second = talk.agent.worker(claim_ttl=1.0, poll_interval=0.05)
    running = asyncio.get_running_loop().create_task(second.run())
    try:
        async with asyncio.timeout(30):
            async for watched in talk.agent.watch(thread_id=talk.thread, turn_id=turn_id):
                if isinstance(watched.item, TurnCompleted):
                    line("agent", watched.item.result.response.text)
    finally:
        second.stop()
        await running
    finished = await store.inbox.get(talk.thread, turn_id)  # type: ignore[attr-defined]
    check(finished is not None and finished.state is RequestState.DONE, "the request is done")
    completed = await store.list_receipts(thread_id=talk.thread, status=ReceiptStatus.COMPLETED)
    note(
        f"request {turn_id}: {finished.state} after {finished.attempts} attempts; the booking's"
        f" receipt is {completed[-1].status}, replayed from the ledger by the second worker"
    )
    check(talk.provider.total_calls() == calls_before, "the second worker called no provider")
