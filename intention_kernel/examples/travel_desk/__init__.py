"""A small travel desk: search hotels (read), quote a stay (read, needs the search), book it
(write, confirmation required), answer desk questions (read).

It runs against ``FakeHotelProvider``, a provider port that honours idempotency keys, and
``scripted_model()``, a deterministic stand-in for a language model: no network, no API key.
"""

from .agent import HOTELS, build_agent
from .model import scripted_model
from .provider import FakeHotelProvider

__all__ = ["HOTELS", "FakeHotelProvider", "build_agent", "scripted_model"]
