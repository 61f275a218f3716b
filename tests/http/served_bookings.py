"""A small booking agent as ``intention-kernel serve --agent
tests.http.served_bookings:booking_agent`` starts it: "book room N" asks to confirm, a press of
"yes" books the room through ``context.run_effect`` against a hotel port that appends every
call's key to the file named by ``IK_TEST_BOOKINGS`` (so the calls of every process are
counted), and the answer is streamed slowly enough for a client to leave between its events.
"slow N" books nothing: the model takes N seconds (a fraction allowed) to interpret it, then
replies "Waited N s.": a turn that holds its thread for a known time. "reserve room N wait S"
asks to confirm a hold: the write tells the hotel, with the completion token the hotel calls
back with (written to ``<IK_TEST_BOOKINGS>.callbacks``), then the step parks for S seconds
until the hotel completes ``hold-N`` (``POST .../external/hold-N``)."""

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
    AwaitingExternal,
    CapabilityContext,
    CompiledAgent,
    Completed,
    Kernel,
    define_agent,
    define_capability,
)
from intention_kernel.testing import ScriptedModelGateway

COMPLETION_SECRET = "the served bookings' completion secret, 32+ bytes"
ANSWER = "Booked room {room}: your confirmation is on its way, with the receipt attached."


class Room(BaseModel):
    room: int


class Booking(BaseModel):
    booking_id: str


class Hold(BaseModel):
    room: int
    wait: float


class Held(BaseModel):
    room: int
    status: str


def _record(key: str) -> None:
    with open(os.environ["IK_TEST_BOOKINGS"], "a", encoding="utf-8") as log:
        log.write(key + "\n")


class CountingHotel:
    """Every call is recorded before the booking takes a while."""

    async def book(self, authority: EffectAuthority, room: int) -> JsonValue:
        await asyncio.to_thread(_record, authority.idempotency_key)
        await asyncio.sleep(0.2)
        return {"booking_id": f"BK-{room}", "room": room}


def _callback(line: str) -> None:
    with open(os.environ["IK_TEST_BOOKINGS"] + ".callbacks", "a", encoding="utf-8") as log:
        log.write(line + "\n")


async def _reserve(context: CapabilityContext, hold: Hold) -> AwaitingExternal | Completed:
    """Tell the hotel to hold the room (a write, handing it the completion token), then wait
    for the hotel's answer; resumed by it, report the hold."""
    key = f"hold-{hold.room}"
    token = context.completion_token(key)

    async def tell_hotel(authority: EffectAuthority) -> JsonValue:
        await asyncio.to_thread(_record, authority.idempotency_key)
        await asyncio.to_thread(_callback, f"{context.turn.thread_id} {key} {token}")
        return {"hold_id": f"H-{hold.room}"}

    effect = await context.run_effect(f"hold:{hold.room}", tell_hotel)
    assert isinstance(effect.value, dict)
    if context.external is None:
        return AwaitingExternal(
            key=key,
            timeout=hold.wait,
            payload={"hold_id": effect.value["hold_id"]},
            text=f"The hotel is asked to hold room {hold.room}.",
        )
    result = context.external.result
    status = str(result.get("status")) if isinstance(result, dict) else "unknown"
    return Completed(
        output=Held(room=hold.room, status=status), text=f"Room {hold.room} held: {status}."
    )


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
    hold = re.fullmatch(r"reserve room (\d+) wait (\d+(?:\.\d+)?)", text)
    if hold is not None:
        wanted: dict[str, JsonValue] = {"room": int(hold.group(1)), "wait": float(hold.group(2))}
        return {"intentions": [{"capability": "rooms.reserve", "input": wanted}], "answer": None}
    found = re.fullmatch(r"book room (\d+)", text)
    intentions: list[JsonValue] = (
        [{"capability": "rooms.book", "input": {"room": int(found.group(1))}}] if found else []
    )
    return {"intentions": intentions, "answer": None}


def _compose(request: ModelRequest) -> JsonValue:
    if isinstance(reply := request.input.get("reply"), str):
        return {"text": reply, "citations": []}
    held = re.search(r"Room \d+ held: \w+\.", str(request.input))
    if held is not None:
        return {"text": held.group(0), "citations": []}
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
    kernel = Kernel(
        durability=store,
        model=model,
        ports={"hotel": CountingHotel()},
        completion_secret=COMPLETION_SECRET,
    )
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
            ),
            define_capability(
                id="rooms.reserve",
                version="1.0.0",
                description="Hold a room until the hotel confirms it.",
                input=Hold,
                output=Held,
                effect="write",
                confirmation="required",
                execute=_reserve,
            ),
        ],
    )
    return kernel.compile(definition)


def callbacks(path: Any) -> list[list[str]]:
    """What the hotel was handed to call back with: ``[thread_id, key, token]`` per call."""
    try:
        with open(f"{path}.callbacks", encoding="utf-8") as log:
            return [line.split() for line in log.read().splitlines()]
    except FileNotFoundError:
        return []


def bookings(path: Any) -> list[str]:
    """The keys the hotel was called with, in call order."""
    try:
        with open(path, encoding="utf-8") as log:
            return log.read().split()
    except FileNotFoundError:
        return []
