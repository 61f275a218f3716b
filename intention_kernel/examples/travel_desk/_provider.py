"""``FakeHotelProvider``: the booking system the travel desk writes to.

Why a fake with real idempotency: the demo and the tests must show that a booking is made once
per key however often it is asked for, and what happens when the provider applies a booking but
the response is lost on the way back (``lose_next_response``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

__all__ = ["FakeHotelProvider"]


class FakeHotelProvider:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        """Provider calls per idempotency key."""
        self.bookings: dict[str, dict[str, Any]] = {}
        """Bookings made, by idempotency key (one per key, as real providers keep them)."""
        self.lose_next_response = False
        """Apply the next booking, then fail as if the connection dropped before the answer."""

    async def book(self, quote: dict[str, Any], *, idempotency_key: str) -> dict[str, Any]:
        self.calls[idempotency_key] += 1
        booking = self.bookings.get(idempotency_key)
        if booking is None:
            booking = {
                "booking_id": f"BK-{1001 + len(self.bookings)}",
                "hotel": quote["hotel"],
                "city": quote["city"],
                "nights": quote["nights"],
                "total_eur": quote["total_eur"],
            }
            self.bookings[idempotency_key] = booking
        if self.lose_next_response:
            self.lose_next_response = False
            raise ConnectionResetError("connection reset after the booking was sent")
        return dict(booking)

    def find(self, idempotency_key: str) -> dict[str, Any] | None:
        """What an operator sees in the provider's dashboard for a key."""
        booking = self.bookings.get(idempotency_key)
        return None if booking is None else dict(booking)

    def total_calls(self) -> int:
        return sum(self.calls.values())
