"""The turn inbox's metrics through the SDK's in-memory reader: the backlog gauges read from
the store, and what a worker records per request (wait, attempts, outcomes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from intention_kernel import telemetry
from intention_kernel.contracts import ModelRequest, ModelResponse
from intention_kernel.contracts.errors import ModelGatewayError
from intention_kernel.contracts.inbox import RequestState, TurnInbox
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.examples.travel_desk import FakeHotelProvider, build_agent, scripted_model
from intention_kernel.kernel import CompiledAgent, Kernel
from intention_kernel.telemetry import InboxBacklog
from intention_kernel.testing import MemoryDurability

from .conftest import Measured

AGENT = {"ik.agent.id": "travel-desk"}
TEXT = "Is breakfast included?"


class Failing:
    """The travel desk's scripted model, failing as a marker in the user's text says:
    ``[flaky]`` once with a retryable error, ``[refused]`` with a non-retryable one, ``[slow]``
    never answering (until cancelled)."""

    def __init__(self) -> None:
        self.script = scripted_model()
        self.flaky_left = 1
        self.slow_started = asyncio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        text = str(request.input.get("text", ""))
        if request.task == "interpret":
            if "[flaky]" in text and self.flaky_left:
                self.flaky_left -= 1
                raise ModelGatewayError("the provider is overloaded")
            if "[refused]" in text:
                raise ModelGatewayError("the provider refused", retryable=False)
            if "[slow]" in text:
                self.slow_started.set()
                await asyncio.Event().wait()
        return await self.script.complete(request)


@pytest.fixture(params=["sqlite", "memory"])
async def durable(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryDurability()
        return
    store = await SQLiteDurability.open(tmp_path / "inbox.db")
    yield store
    await store.close()


def desk(store: Any, measured: Measured | None, model: Failing) -> CompiledAgent:
    kernel = Kernel(
        durability=store,
        model=model,
        ports={"hotels": FakeHotelProvider()},
        meter_provider=measured.provider if measured is not None else None,
    )
    return kernel.compile(build_agent())


async def submit(agent: CompiledAgent, thread: str, text: str = TEXT, **extra: Any) -> None:
    await agent.submit(thread_id=thread, turn_id="1", text=text, **extra)


async def until_settled(inbox: TurnInbox, threads: list[str]) -> None:
    async with asyncio.timeout(20):
        for thread in threads:
            while True:
                found = await inbox.get(thread, "1")
                if found is not None and found.state in (RequestState.DONE, RequestState.DEAD):
                    break
                await asyncio.sleep(0.01)


async def working(agent: CompiledAgent, threads: list[str], **settings: Any) -> None:
    """A worker runs until the requests of ``threads`` are done or dead."""
    settings = {"poll_interval": 0.01, "backoff": 0.01, "claim_ttl": 5.0, **settings}
    worker = agent.worker(**settings)
    task = asyncio.create_task(worker.run())
    try:
        await until_settled(agent.durability.inbox, threads)  # type: ignore[attr-defined]
    finally:
        worker.stop()
        await asyncio.wait_for(task, 20)


async def test_a_worker_records_wait_attempts_and_outcomes(
    durable: Any, measured: Measured
) -> None:
    agent = desk(durable, measured, Failing())
    await submit(agent, "t-ok")
    await submit(agent, "t-flaky", f"{TEXT} [flaky]")
    await submit(agent, "t-refused", f"{TEXT} [refused]")
    await asyncio.sleep(0.2)  # every request waits at least this long for a worker
    await working(agent, ["t-ok", "t-flaky", "t-refused"], concurrency=1)

    outcomes = {
        (a["ik.request.outcome"], a.get("error.type")): p.value
        for a, p in measured.points("ik.inbox.outcomes")
    }
    assert outcomes == {
        ("done", None): 2,
        ("retried", "MODEL_GATEWAY_FAILED"): 1,
        ("dead", "MODEL_GATEWAY_FAILED"): 1,
    }
    assert all(a["ik.agent.id"] == "travel-desk" for a, _ in measured.points("ik.inbox.outcomes"))
    attempts = {a["ik.request.outcome"]: p for a, p in measured.points("ik.inbox.attempts")}
    assert set(attempts) == {"done", "dead"}
    assert (attempts["done"].count, attempts["done"].sum) == (2, 1 + 2)  # t-flaky took two
    assert (attempts["dead"].count, attempts["dead"].sum) == (1, 1)  # not retryable: one
    [(attrs, wait)] = measured.points("ik.inbox.wait")
    assert attrs == AGENT
    assert wait.count == 3  # first claims only: the retry's claim is not a wait for a worker
    assert wait.min >= 0.2 and wait.max < 20


async def test_the_wait_counts_from_not_before(durable: Any, measured: Measured) -> None:
    agent = desk(durable, measured, Failing())
    await submit(agent, "t-later", not_before=datetime.now(UTC) + timedelta(seconds=0.6))
    await working(agent, ["t-later"])
    [(_, wait)] = measured.points("ik.inbox.wait")
    assert wait.count == 1 and wait.max < 0.5  # from its not_before, not its submission


async def test_a_drained_request_is_released_not_failed(durable: Any, measured: Measured) -> None:
    model = Failing()
    agent = desk(durable, measured, model)
    await submit(agent, "t-slow", f"{TEXT} [slow]")
    worker = agent.worker(poll_interval=0.01, grace=0.05, claim_ttl=5.0)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(model.slow_started.wait(), 10)
    worker.stop()
    await asyncio.wait_for(task, 10)
    [(attrs, released)] = measured.points("ik.inbox.outcomes")
    assert attrs == {**AGENT, "ik.request.outcome": "released"} and released.value == 1
    assert measured.points("ik.inbox.attempts") == []  # not finished: no attempts recorded
    found = await durable.inbox.get("t-slow", "1")
    assert found.state is RequestState.PENDING


async def test_the_backlog_gauges_read_the_store(durable: Any, measured: Measured) -> None:
    inbox: TurnInbox = durable.inbox
    backlog = InboxBacklog(inbox, meter_provider=measured.provider)
    assert measured.points("ik.inbox.requests") == []  # nothing read yet: nothing reported
    assert measured.points("ik.inbox.oldest_pending.age") == []
    stats = await backlog.refresh()
    assert (stats.pending, stats.running, stats.dead) == (0, 0, 0)
    [(_, age)] = measured.points("ik.inbox.oldest_pending.age")
    assert age.value == 0.0  # nothing pending: no wait

    agent = desk(durable, None, Failing())
    for thread in ("a", "b", "c", "d"):
        await submit(agent, thread)
    claimed = await inbox.claim("w-1", ttl=60)
    assert claimed is not None and claimed.thread_id == "a"
    dead = await inbox.claim("w-1", ttl=60)
    assert dead is not None and dead.thread_id == "b"
    await inbox.release("w-1", "b", "1", retry_in=None, error_code="INTERNAL", error="boom")
    await asyncio.sleep(0.05)
    await backlog.refresh()
    by_state = {a["ik.request.state"]: p.value for a, p in measured.points("ik.inbox.requests")}
    assert by_state == {"pending": 2, "running": 1, "dead": 1}
    [(attrs, age)] = measured.points("ik.inbox.oldest_pending.age")
    assert attrs == {} and 0.05 <= age.value < 60

    await inbox.cancel("c", "1", actor="ops", note="not wanted")  # an operator, elsewhere
    await backlog.refresh()
    by_state = {a["ik.request.state"]: p.value for a, p in measured.points("ik.inbox.requests")}
    assert by_state == {"pending": 1, "running": 1, "dead": 2}


async def test_a_failed_read_keeps_the_last_numbers(measured: Measured) -> None:
    class Flaky:
        def __init__(self) -> None:
            self.inbox = MemoryDurability().inbox
            self.fail = False

        async def stats(self) -> Any:
            if self.fail:
                raise RuntimeError("the store is away")
            return await self.inbox.stats()

    source = Flaky()
    backlog = InboxBacklog(source, meter_provider=measured.provider)
    watching = asyncio.create_task(backlog.watch(interval=0.01))
    try:
        async with asyncio.timeout(5):
            while backlog.stats is None:  # noqa: ASYNC110 - the gauge has no event to wait on
                await asyncio.sleep(0.01)
        source.fail = True
        await asyncio.sleep(0.05)
    finally:
        watching.cancel()
    assert backlog.stats is not None and backlog.stats.pending == 0
    assert len(measured.points("ik.inbox.requests")) == 3


class Watched:
    """Instruments that note every use (and record nothing)."""

    def __init__(self) -> None:
        self.used: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.used.append(name)
        return self

    def record(self, *args: object) -> None:
        self.used.append("record")

    def add(self, *args: object) -> None:
        self.used.append("add")


async def test_without_an_sdk_a_worker_records_nothing(durable: Any) -> None:
    assert telemetry.Telemetry(enabled=False).inbox("travel-desk") is telemetry.NULL
    agent = desk(durable, None, Failing())  # no meter provider given, no global SDK
    kernel_telemetry = agent._telemetry
    assert not kernel_telemetry.metered()
    watched = Watched()
    kernel_telemetry._inbox = watched  # type: ignore[assignment]
    await submit(agent, "t-ok")
    await submit(agent, "t-refused", f"{TEXT} [refused]")
    await working(agent, ["t-ok", "t-refused"])
    assert watched.used == []  # metered() said no: no instrument was touched
