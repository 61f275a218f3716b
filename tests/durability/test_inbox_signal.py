"""The inbox's in-process wake-up (``Signal``): waiters by mark, and subscribers (a worker's
claim loop waits on one future that a subscriber resolves, not on a task per wait)."""

from __future__ import annotations

import asyncio

from intention_kernel.durability._inbox import Signal


async def test_a_waiter_returns_on_a_fire_after_its_mark_or_at_its_timeout() -> None:
    signal = Signal()
    mark = signal.mark()
    signal.fire()
    async with asyncio.timeout(1):
        await signal.wait(mark, 60)  # fired since the mark: at once
    mark = signal.mark()
    waiter = asyncio.create_task(signal.wait(mark, 60))
    await asyncio.sleep(0)
    assert not waiter.done()
    signal.fire()
    async with asyncio.timeout(1):
        await waiter
    started = asyncio.get_running_loop().time()
    await signal.wait(signal.mark(), 0.05)  # nothing fired: the timeout
    assert asyncio.get_running_loop().time() - started >= 0.04


async def test_subscribers_are_called_at_every_fire_until_they_unsubscribe() -> None:
    signal = Signal()
    seen: list[str] = []
    stop_a = signal.subscribe(lambda: seen.append("a"))

    def b() -> None:
        seen.append("b")
        stop_b()  # unsubscribing while the signal calls its subscribers

    stop_b = signal.subscribe(b)
    signal.fire()
    assert seen == ["a", "b"]
    signal.fire()
    assert seen == ["a", "b", "a"]
    stop_a()
    stop_a()  # twice is harmless
    signal.fire()
    assert seen == ["a", "b", "a"]
