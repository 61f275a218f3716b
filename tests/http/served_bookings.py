"""A small booking agent as ``intention-kernel serve --agent
tests.http.served_bookings:booking_agent`` starts it: "book room N" asks to confirm, a press of
"yes" books the room through ``context.run_effect`` against a hotel port that appends every
call's key to the file named by ``IK_TEST_BOOKINGS`` (so the calls of every process are
counted), and the answer is streamed slowly enough for a client to leave between its events.
"slow N" books nothing: the model takes N seconds (a fraction allowed) to interpret it, then
replies "Waited N s.": a turn that holds its thread for a known time."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, JsonValue

from intention_kernel.contracts import Durability, EffectAuthority, ModelRequest
from intention_kernel.contracts.gateway import ModelOutputDelta, ModelResponse
from intention_kernel.kernel import (
    CapabilityContext,
    CompiledAgent,
    Completed,
    Kernel,
    define_agent,
    define_capability,
)
from intention_kernel.testing import ScriptedModelGateway

ANSWER = "Booked room {room}: your confirmation is on its way, with the receipt attached."


class Room(BaseModel):
    room: int


class Booking(BaseModel):
    booking_id: str


def _record(key: str) -> None:
    with open(os.environ["IK_TEST_BOOKINGS"], "a", encoding="utf-8") as log:
        log.write(key + "\n")


class CountingHotel:
    """Every call is recorded before the booking takes a while."""

    async def book(self, authority: EffectAuthority, room: int) -> JsonValue:
        await asyncio.to_thread(_record, authority.idempotency_key)
        await asyncio.sleep(0.2)
        return {"booking_id": f"BK-{room}", "room": room}


async def _book(context: CapabilityContext, room: Room) -> Completed:
    hotel: CountingHotel = context.ports["hotel"]
    effect = await context.run_effect(
        f"room:{room.room}", lambda authority: hotel.book(authority, room.room)
    )
    assert isinstance(effect.value, dict)
    return Completed(
        output=Booking(booking_id=str(effect.value["booking_id"])), text=f"Booked {room.room}."
    )


async def _interpret(request: ModelRequest) -> JsonValue:
    text = str(request.input.get("text", ""))
    slow = re.fullmatch(r"slow (\d+(?:\.\d+)?)", text)
    if slow is not None:
        await asyncio.sleep(float(slow.group(1)))
        return {"intentions": [], "answer": None, "reply": f"Waited {slow.group(1)} s."}
    found = re.fullmatch(r"book room (\d+)", text)
    intentions: list[JsonValue] = (
        [{"capability": "rooms.book", "input": {"room": int(found.group(1))}}] if found else []
    )
    return {"intentions": intentions, "answer": None}


def _compose(request: ModelRequest) -> JsonValue:
    if isinstance(reply := request.input.get("reply"), str):
        return {"text": reply, "citations": []}
    found = re.search(r"Booked (\d+)\.", str(request.input))
    if found is None:
        return {"text": "Please confirm the booking.", "citations": []}
    return {"text": ANSWER.format(room=found.group(1)), "citations": []}


class SlowModel(ScriptedModelGateway):
    """The scripted model, streaming each piece of its answer after a short pause."""

    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[ModelOutputDelta | ModelResponse]:
        async for item in super().stream(request):
            if isinstance(item, ModelOutputDelta):
                await asyncio.sleep(0.03)
            yield item


def booking_agent(store: Durability) -> CompiledAgent:
    model = SlowModel({"interpret": _interpret, "compose": _compose}, chunk_size=12)
    kernel = Kernel(durability=store, model=model, ports={"hotel": CountingHotel()})
    definition = define_agent(
        id="rooms",
        version="1.0.0",
        description="Books rooms.",
        capabilities=[
            define_capability(
                id="rooms.book",
                version="1.0.0",
                description="Book a room by its number.",
                input=Room,
                output=Booking,
                effect="write",
                confirmation="required",
                execute=_book,
            )
        ],
    )
    return kernel.compile(definition)


def bookings(path: Any) -> list[str]:
    """The keys the hotel was called with, in call order."""
    try:
        with open(path, encoding="utf-8") as log:
            return log.read().split()
    except FileNotFoundError:
        return []
