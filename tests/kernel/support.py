"""A small support-desk agent, a scripted model and a host port for the kernel tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, JsonValue

from intention_kernel.contracts import DurabilityStore, EventCategory, ModelRequest
from intention_kernel.kernel import (
    CapabilityContext,
    CompiledAgent,
    Completed,
    ErrorClassifier,
    Guidance,
    Kernel,
    KernelLimits,
    ProducedFact,
    Redactor,
    define_agent,
    define_capability,
)
from intention_kernel.testing import EventCollector, ScriptedModelGateway


class OrderQuery(BaseModel):
    order_id: str


class OrderInfo(BaseModel):
    order_id: str
    status: str


class TrackQuery(BaseModel):
    pass


class Tracking(BaseModel):
    order_id: str
    carrier: str


class FaqQuery(BaseModel):
    topic: str


class FaqAnswer(BaseModel):
    answer: str


@dataclass
class Shop:
    """The host's port: counts calls and can be told to wait on a barrier or crash."""

    calls: dict[str, int] = field(default_factory=dict)
    barrier: asyncio.Barrier | None = None
    crash_next: set[str] = field(default_factory=set)
    inside: int = 0
    max_inside: int = 0
    delay: float = 0.0

    async def enter(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.crash_next:
            self.crash_next.discard(name)
            raise RuntimeError(f"{name} crashed")
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        try:
            if self.barrier is not None:
                await asyncio.wait_for(self.barrier.wait(), 2.0)
            if self.delay:
                await asyncio.sleep(self.delay)
        finally:
            self.inside -= 1

    def total(self) -> int:
        return sum(self.calls.values())


async def _lookup(context: CapabilityContext, query: OrderQuery) -> Completed:
    shop: Shop = context.ports["shop"]
    await shop.enter("orders.lookup")
    return Completed(
        output=OrderInfo(order_id=query.order_id, status="shipped"),
        facts=(ProducedFact("order@1", {"order_id": query.order_id, "status": "shipped"}),),
        text=f"Order {query.order_id} has shipped.",
        source="orders-db",
    )


async def _track(context: CapabilityContext, query: TrackQuery) -> Completed:
    shop: Shop = context.ports["shop"]
    await shop.enter("shipping.track")
    order = context.fact("order@1")
    assert order is not None, "the order fact must be visible"
    assert isinstance(order.value, dict)
    order_id = str(order.value["order_id"])
    return Completed(
        output={"order_id": order_id, "carrier": "PostNL"},
        facts=(ProducedFact("shipment@1", {"order_id": order_id, "carrier": "PostNL"}),),
        text=f"Order {order_id} travels with PostNL.",
    )


async def _faq(context: CapabilityContext, query: FaqQuery) -> Completed:
    shop: Shop = context.ports["shop"]
    await shop.enter("faq.search")
    return Completed(
        output=FaqAnswer(answer=f"About {query.topic}: 30 days."),
        text=f"About {query.topic}: 30 days.",
    )


async def _hours(context: CapabilityContext, query: TrackQuery) -> Completed:
    shop: Shop = context.ports["shop"]
    await shop.enter("store.hours")
    context.events.emit("hours.looked_up", {"source": "static"})
    return Completed(output=FaqAnswer(answer="9 to 5"), text="We are open 9 to 5.")


def capabilities() -> list[Any]:
    return [
        define_capability(
            id="orders.lookup",
            version="1.0.0",
            description="Look up an order by id.",
            input=OrderQuery,
            output=OrderInfo,
            provides=["order@1"],
            effect="read",
            guidance=Guidance(
                when_to_use="the user asks about an order", examples=("where is 42",)
            ),
            execute=_lookup,
        ),
        define_capability(
            id="shipping.track",
            version="1.0.0",
            description="Track the shipment of the current order.",
            input=TrackQuery,
            output=Tracking,
            requires=["order@1"],
            provides=["shipment@1"],
            execute=_track,
        ),
        define_capability(
            id="faq.search",
            version="1.0.0",
            description="Answer a policy question.",
            input=FaqQuery,
            output=FaqAnswer,
            execute=_faq,
        ),
        define_capability(
            id="store.hours",
            version="1.0.0",
            description="Tell the opening hours.",
            input=TrackQuery,
            output=FaqAnswer,
            execute=_hours,
        ),
    ]


def support_agent(extra: list[Any] | None = None, **overrides: Any) -> Any:
    spec: dict[str, Any] = {
        "id": "support",
        "version": "1.0.0",
        "description": "A support desk.",
        "capabilities": capabilities() + (extra or []),
        "instructions": "Help customers with orders.",
    }
    spec.update(overrides)
    return define_agent(**spec)


Intentions = list[dict[str, Any]]


def cite_all(request: ModelRequest) -> JsonValue:
    """A composing model that cites every evidence id and repeats the canonical texts."""
    outcomes = request.input["outcomes"]
    assert isinstance(outcomes, list)
    texts = [str(o["text"]) for o in outcomes if isinstance(o, dict) and o.get("text")]
    ids: list[JsonValue] = [
        str(o["evidence_id"]) for o in outcomes if isinstance(o, dict) and o["evidence_id"]
    ]
    return {"text": " ".join(texts) or "Okay.", "citations": ids}


@dataclass
class World:
    durability: DurabilityStore
    gateway: ScriptedModelGateway
    shop: Shop
    collector: EventCollector
    kernel: Kernel
    agent: CompiledAgent
    routes: dict[str, Intentions]
    answers: dict[str, str] = field(default_factory=dict)

    def agent_definition(self) -> Any:
        return support_agent()

    def say(self, text: str, intentions: Intentions, answer: str | None = None) -> None:
        """Teach the scripted model what ``text`` means (and which option it answers)."""
        self.routes[text] = intentions
        if answer is not None:
            self.answers[text] = answer

    async def run(self, turn_id: str, text: str, thread_id: str = "t1", **kw: Any) -> Any:
        return await self.agent.run(thread_id=thread_id, turn_id=turn_id, text=text, **kw)


class Clock:
    """A kernel or scheduler clock a test moves (``now``, ``advance``)."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def make_world(
    durability: DurabilityStore,
    *,
    agent: Any = None,
    limits: KernelLimits | None = None,
    redact: Redactor | None = None,
    script: Mapping[str, Any] | None = None,
    ports: Mapping[str, Any] | None = None,
    classify_error: ErrorClassifier | None = None,
    clock: Callable[[], datetime] | None = None,
    completion_secret: str | list[str] | None = None,
    outbox_categories: Iterable[EventCategory] = tuple(EventCategory),
) -> World:
    routes: dict[str, Intentions] = {}
    answers: dict[str, str] = {}

    def interpret(request: ModelRequest) -> JsonValue:
        text = request.input["text"]
        assert isinstance(text, str)
        answer: JsonValue = {"option": answers[text]} if text in answers else None
        return {"intentions": list(routes.get(text, [])), "answer": answer, "reply": None}

    gateway = ScriptedModelGateway({"interpret": interpret, "compose": cite_all, **(script or {})})
    shop = Shop()
    collector = EventCollector()
    kernel = Kernel(
        durability=durability,
        model=gateway,
        ports={"shop": shop, **(ports or {})},
        limits=limits,
        redact=redact,
        sinks=[collector],
        classify_error=classify_error,
        clock=clock,
        completion_secret=completion_secret,
        outbox_categories=outbox_categories,
    )
    compiled = kernel.compile(agent if agent is not None else support_agent())
    return World(durability, gateway, shop, collector, kernel, compiled, routes, answers)


@asynccontextmanager
async def working(world: World, **settings: Any) -> AsyncIterator[None]:
    """A worker of the world's agent running for the block (fast polls and backoff)."""
    chosen: dict[str, Any] = {"claim_ttl": 2.0, "poll_interval": 0.05, "backoff": 0.05}
    worker = world.agent.worker(**{**chosen, **settings})
    task = asyncio.create_task(worker.run())
    try:
        yield
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
