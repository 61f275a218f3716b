"""The ``otel`` extra is optional: without ``opentelemetry`` the kernel runs and records
nothing; with the API but no SDK, a turn records nothing either."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

from intention_kernel import telemetry
from intention_kernel.durability.sqlite import SQLiteDurability

from .conftest import make_desk

WITHOUT_OTEL = textwrap.dedent(
    """
    import asyncio, sys
    sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
    from intention_kernel import telemetry
    from intention_kernel.examples.travel_desk import FakeHotelProvider, build_agent, scripted_model
    from intention_kernel.kernel import Kernel
    from intention_kernel.relay import OutboxRelay
    from intention_kernel.testing import MemoryDurability

    async def main() -> None:
        store = MemoryDurability()
        hotels = {"hotels": FakeHotelProvider()}
        kernel = Kernel(durability=store, model=scripted_model(), ports=hotels)
        desk = kernel.compile(build_agent())
        done = await desk.run(thread_id="t1", turn_id="1", text="Find me a hotel in Lisbon")
        assert not telemetry.AVAILABLE and "opentelemetry.trace" not in sys.modules
        events = await store.read_outbox()
        assert events and all(e.event.traceparent is None for e in events)
        assert telemetry.UncertainReceipts(store).count is None
        backlog = telemetry.InboxBacklog(store.inbox)
        assert backlog.stats is None and (await backlog.refresh()).pending == 0
        await desk.submit(thread_id="t2", turn_id="1", text="Is breakfast included?")
        worker = desk.worker(poll_interval=0.01)
        working = asyncio.create_task(worker.run())
        while (await store.inbox.get("t2", "1")).state != "done":
            await asyncio.sleep(0.01)
        worker.stop()
        await working
        OutboxRelay(store, object())  # type: ignore[arg-type]
        print("ok", done.response.text[:20])

    asyncio.run(main())
    """
)


def test_the_kernel_runs_without_opentelemetry() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")


async def test_without_an_sdk_a_turn_records_nothing(tmp_path: object) -> None:
    store = await SQLiteDurability.open(tmp_path / "desk.db")  # type: ignore[operator]
    try:
        desk = make_desk(store, None)
        started: list[object] = []
        original = telemetry.Telemetry.turn

        def turn(self: telemetry.Telemetry, **given: Any) -> object:
            started.append(original(self, **given))
            return started[-1]

        telemetry.Telemetry.turn = turn  # type: ignore[method-assign,assignment]
        try:
            held = await desk.held_booking()
            await desk.confirm(held)
        finally:
            telemetry.Telemetry.turn = original  # type: ignore[method-assign]
        # No SDK configured: every turn got the shared no-op (no span, no attribute, no metric).
        assert len(started) == 4 and all(t is telemetry.NULL for t in started)
    finally:
        await store.close()
