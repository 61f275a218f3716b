"""A stream consumer that leaves early is a cancelled ``run`` (``docs/cancellation.md``).

The turn under test accepts a held confirmation and so runs a write (the charge), on a real
SQLite store. The consumer is cancelled (or closes the stream) after each item it can receive,
mid-text included, and while the provider call runs. Each time: when the consumer's
cancellation returns, the turn's own task has ended (no storage work left running), and the
same turn id delivered again replays or runs it without charging twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
from pydantic import JsonValue

from intention_kernel import StreamItem, TurnCompleted
from intention_kernel.contracts import EffectAuthority, KernelError, ReceiptStatus
from intention_kernel.durability.sqlite import SQLiteDurability

from .support import World, make_world, support_agent
from .writes import CHARGE, CHARGE_42, REFUND, Payments, accept, payments_world

KEY = "payments.charge:order:42"


def others() -> list[asyncio.Task[object]]:
    """Tasks still running besides the test's own."""
    me = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not me and not t.done()]


async def held_turn(world: World, thread: str) -> dict[str, JsonValue]:
    world.gateway.chunk_size = 1  # one delta per character: many points inside the text
    held = await world.run("turn-1", "charge 42", thread_id=thread)
    return accept(held)


async def check_redelivery(
    world: World,
    store: SQLiteDurability,
    payments: Payments,
    thread: str,
    selection: dict[str, JsonValue],
    at: str,
) -> list[str]:
    """Deliver the same turn again, as the docs tell a caller to, and check the write."""
    problems: list[str] = []
    try:
        again = await world.run("turn-2", "", thread_id=thread, selection=selection)
    except KernelError as exc:
        return [f"{at}: the redelivery failed with {exc.code}"]
    stored = await store.get_turn(thread, "turn-2")
    if stored is None or (not again.replayed and stored.trace_id != again.trace_id):
        problems.append(f"{at}: a committed turn ran again (replayed={again.replayed})")
    if len(payments.calls) > 1:
        problems.append(f"{at}: the provider was called {len(payments.calls)} times")
    statuses = {s.status for s in again.response.steps if s.capability_id == "payments.charge"}
    if payments.charges and statuses & {"failed", "skipped"}:
        problems.append(f"{at}: charged, but the answer says {statuses}")
    receipt = await store.get_receipt(thread, KEY)
    if payments.charges and (receipt is None or receipt.status is ReceiptStatus.FAILED):
        problems.append(f"{at}: charged, but the receipt is {receipt}")
    return problems


async def leave_at(
    items: AsyncIterator[StreamItem],
    got: list[StreamItem],
    at: int,
    reached: asyncio.Event,
    *,
    close: bool,
) -> None:
    """Consume ``items``; at item ``at``, close the stream or wait there to be cancelled."""
    async with contextlib.aclosing(items):  # type: ignore[type-var]
        async for item in items:
            got.append(item)
            if len(got) == at:
                reached.set()
                if close:
                    return  # leaves the block: the stream is closed here
                await asyncio.sleep(0)  # cancelled at this item


@pytest.mark.parametrize("how", ["cancel", "close"])
async def test_a_stream_left_at_every_item_behaves_like_a_cancelled_run(
    tmp_path: Path, how: Literal["cancel", "close"]
) -> None:
    store = await SQLiteDurability.open(tmp_path / "kernel.db")
    violations: list[str] = []
    left = 0
    try:
        for at in range(1, 400):
            world, payments = payments_world(store)
            thread = f"{how}-{at}"
            selection = await held_turn(world, thread)
            got: list[StreamItem] = []
            reached = asyncio.Event()

            items = world.agent.stream(
                thread_id=thread, turn_id="turn-2", text="", selection=selection
            )
            consumer = asyncio.create_task(leave_at(items, got, at, reached, close=how == "close"))
            waiter = asyncio.create_task(reached.wait())
            await asyncio.wait({consumer, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if not reached.is_set():
                await consumer
                break  # the stream has fewer items: every position was tried
            if how == "cancel":
                consumer.cancel()
            outcome = (await asyncio.gather(consumer, return_exceptions=True))[0]
            if any(isinstance(item, TurnCompleted) for item in got):
                break  # the last item arrived: nothing left to cancel
            left += 1
            if how == "cancel" and not isinstance(outcome, asyncio.CancelledError):
                violations.append(f"{at}: the consumer ended with {outcome!r}, not cancelled")
            if how == "close" and outcome is not None:
                violations.append(f"{at}: closing the stream raised {outcome!r}")
            running = [t for t in others() if t is not waiter]
            if running:
                violations.append(f"{at}: {len(running)} task(s) of the turn still running")
                await asyncio.gather(*running, return_exceptions=True)
            violations += await check_redelivery(
                world, store, payments, thread, selection, f"{how} {at}"
            )
    finally:
        await store.close()
    assert left >= 10, "the stream has more items than that"
    assert violations == [], "\n".join(violations[:20])


@dataclass
class SlowPayments(Payments):
    """A provider whose call blocks until released, to cancel while it runs."""

    invoked: list[str] = field(default_factory=list)
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def charge(self, authority: EffectAuthority, order_id: str, amount: int) -> JsonValue:
        self.invoked.append(authority.idempotency_key)
        self.entered.set()
        await self.release.wait()
        return await super().charge(authority, order_id, amount)


async def test_a_stream_cancelled_while_the_write_runs_leaves_it_uncertain(
    tmp_path: Path,
) -> None:
    store = await SQLiteDurability.open(tmp_path / "kernel.db")
    try:
        payments = SlowPayments()
        world = make_world(
            store, agent=support_agent([CHARGE, REFUND]), ports={"payments": payments}
        )
        world.say("charge 42", CHARGE_42)
        selection = await held_turn(world, "t1")
        got: list[StreamItem] = []

        async def consume() -> None:
            async for item in world.agent.stream(
                thread_id="t1", turn_id="turn-2", text="", selection=selection
            ):
                got.append(item)

        consumer = asyncio.create_task(consume())
        await payments.entered.wait()
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        assert others() == [], "the turn ended before the consumer's cancellation returned"
        assert [type(item).__name__ for item in got] == ["StepStarted"]
        receipt = await store.get_receipt("t1", KEY)
        assert receipt is not None and receipt.status is ReceiptStatus.UNCERTAIN
        assert await store.get_turn("t1", "turn-2") is None
        payments.release.set()
        again = await world.run("turn-2", "", thread_id="t1", selection=selection)
        assert not again.replayed
        [step] = [s for s in again.response.steps if s.capability_id == "payments.charge"]
        assert step.status == "uncertain", "being verified, never called again"
        assert payments.invoked == [KEY], "one provider call, the one that was cut off"
    finally:
        await store.close()
