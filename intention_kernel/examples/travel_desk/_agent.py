"""The travel desk's capabilities and agent definition.

``hotels.quote`` requires the ``offers@1`` fact that ``hotels.search`` provides, and
``hotels.book`` requires the ``quote@1`` fact: the user's consent to a booking is bound to the
exact quote revision it was given for.

The capabilities are written in the short form (``@capability``). Each keeps the name of the
input model it had in the long form (``input_name``), so the agent's fingerprint is the one
stored conversations were recorded under (``tests/kernel/test_travel_desk.py`` pins it). The
hotel provider stays a port (``Kernel(ports={"hotels": ...})``): hosts bind the desk that way.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from ...contracts.receipts import EffectAuthority, EffectReceipt
from ...kernel import (
    AgentDefinition,
    CapabilityContext,
    Completed,
    Failed,
    Guidance,
    NeedsDependency,
    ProducedFact,
    capability,
    define_agent,
    provider_idempotency_key,
)
from ._provider import FakeHotelProvider

__all__ = ["DEFAULT_TENANT", "HOTELS", "build_agent", "hotel_key", "receipt_hotel_key"]

DEFAULT_TENANT = "demo"
"""The tenant when the host context names none (as over HTTP, where it holds the actor)."""

HOTELS: dict[str, list[dict[str, Any]]] = {
    "lisbon": [
        {"id": "alfama-inn", "hotel": "Alfama Inn", "eur_per_night": 120},
        {"id": "tejo-suites", "hotel": "Tejo Suites", "eur_per_night": 185},
    ],
    "porto": [
        {"id": "ribeira-rooms", "hotel": "Ribeira Rooms", "eur_per_night": 95},
    ],
}

DESK_ANSWERS = {
    "breakfast": "Breakfast is included at every hotel we book.",
    "check-in": "Check-in is from 15:00, check-out until 11:00.",
    "cancellation": "Bookings can be cancelled free of charge until 48 hours before arrival.",
}


class Offers(BaseModel):
    city: str
    nights: int
    hotels: list[dict[str, Any]]


class Quote(BaseModel):
    quote_id: str
    hotel: str
    city: str
    nights: int
    total_eur: int


class Booking(BaseModel):
    booking_id: str
    hotel: str
    city: str
    nights: int
    total_eur: int


class DeskAnswer(BaseModel):
    answer: str


def _nights(n: int) -> str:
    return f"{n} night" if n == 1 else f"{n} nights"


@capability(
    id="hotels.search",
    input_name="SearchQuery",
    provides=["offers@1"],
    guidance=Guidance(when_to_use="the user looks for a place to stay"),
)
async def search(
    context: CapabilityContext,
    city: Annotated[str, Field(min_length=1)],
    nights: Annotated[int, Field(ge=1, le=30)],
) -> Offers | Completed | Failed:
    """Search hotels in a city for a number of nights."""
    hotels = HOTELS.get(city.strip().lower())
    if not hotels:
        return Failed(f"I have no hotels in {city} yet.")
    offers = Offers(city=city.title(), nights=nights, hotels=hotels)
    names = ", ".join(f"{h['hotel']} ({h['eur_per_night']} EUR/night)" for h in hotels)
    return Completed(
        output=offers,
        facts=(ProducedFact("offers@1", offers.model_dump(mode="json")),),
        text=f"In {offers.city} for {_nights(nights)}: {names}.",
        source="hotel-catalogue",
    )


@capability(
    id="hotels.quote", input_name="QuoteRequest", requires=["offers@1"], provides=["quote@1"]
)
async def quote(
    context: CapabilityContext, hotel: Annotated[str, Field(min_length=1)]
) -> Quote | Completed | NeedsDependency | Failed:
    """Quote the total price of one hotel from the search.

    Args:
        hotel: hotel name or id from the search
    """
    fact = context.fact("offers@1")
    if fact is None or not isinstance(fact.value, dict):
        return NeedsDependency("offers@1", reason="search for hotels first")
    offers = Offers.model_validate(fact.value)
    wanted = hotel.strip().lower()
    match = next((h for h in offers.hotels if wanted in (h["id"], str(h["hotel"]).lower())), None)
    if match is None:
        return Failed(f"{hotel} was not in the search results.")
    total = int(match["eur_per_night"]) * offers.nights
    result = Quote(
        quote_id=f"Q-{match['id']}-{offers.nights}n",
        hotel=str(match["hotel"]),
        city=offers.city,
        nights=offers.nights,
        total_eur=total,
    )
    return Completed(
        output=result,
        facts=(ProducedFact("quote@1", result.model_dump(mode="json")),),
        text=f"{result.hotel}, {_nights(result.nights)}: {total} EUR (quote {result.quote_id}).",
        source="hotel-catalogue",
    )


def hotel_key(authority: EffectAuthority, *, tenant: str, thread: str) -> str:
    """The idempotency key the hotel provider receives for a booking: its key namespace is
    global, so the tenant and the thread are part of it."""
    return provider_idempotency_key(authority, tenant=tenant, thread=thread)


def receipt_hotel_key(receipt: EffectReceipt) -> str | None:
    """The key the provider received for ``receipt`` (a booking under ``DEFAULT_TENANT``), for
    operators to look the write up in the provider's records; ``None`` for other receipts."""
    if receipt.capability_id != "hotels.book":
        return None
    authority = EffectAuthority(receipt.idempotency_key, receipt.id)
    return hotel_key(authority, tenant=DEFAULT_TENANT, thread=receipt.thread_id)


@capability(
    id="hotels.book",
    input_name="BookingRequest",
    requires=["quote@1"],
    provides=["booking@1"],
    effect="write",
    confirmation="required",
)
async def book(
    context: CapabilityContext, quote_id: Annotated[str, Field(min_length=1)]
) -> Booking | Completed | Failed:
    """Book the quoted stay."""
    fact = context.fact("quote@1")
    if fact is None or not isinstance(fact.value, dict):
        return Failed("There is no quote to book; ask me for a quote first.")
    current = Quote.model_validate(fact.value)
    if current.quote_id != quote_id:
        return Failed("That quote is no longer the current one; ask me for a new quote.")
    provider: FakeHotelProvider = context.ports["hotels"]
    tenant = str(context.host_context.get("tenant", DEFAULT_TENANT))
    effect = await context.run_effect(
        f"booking:{current.quote_id}",
        lambda authority: provider.book(
            current.model_dump(mode="json"),
            idempotency_key=hotel_key(authority, tenant=tenant, thread=context.turn.thread_id),
        ),
    )
    booking = Booking.model_validate(effect.value)
    return Completed(
        output=booking,
        facts=(ProducedFact("booking@1", booking.model_dump(mode="json")),),
        text=(
            f"Booked: {booking.hotel}, {_nights(booking.nights)}, {booking.total_eur} EUR "
            f"(booking {booking.booking_id})."
        ),
        source="hotel-provider",
    )


@capability(id="desk.faq", input_name="DeskQuestion")
async def desk(context: CapabilityContext, topic: str) -> DeskAnswer | Completed:
    """Answer a question about breakfast, check-in or cancellation."""
    answer = DESK_ANSWERS.get(topic, "I will ask a colleague and come back to you.")
    return Completed(output=DeskAnswer(answer=answer), text=answer, source="desk-handbook")


def build_agent() -> AgentDefinition:
    """The travel desk agent; bind it with ``Kernel(ports={"hotels": FakeHotelProvider()})``."""
    return define_agent(
        id="travel-desk",
        version="1.0.0",
        description="Finds, quotes and books hotel stays.",
        instructions="Help travellers find and book hotels. Never book without a quote.",
        capabilities=[search, quote, book, desk],
    )
