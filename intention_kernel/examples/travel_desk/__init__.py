"""A small travel desk: search hotels (read), quote a stay (read, needs the search), book it
(write, confirmation required), answer desk questions (read).

It runs against ``FakeHotelProvider``, a provider port that honours idempotency keys, and
``scripted_model()``, a deterministic stand-in for a language model: no network, no API key.
``compile_desk(store)`` binds it to a store, as ``intention-kernel serve --agent
intention_kernel.examples.travel_desk:compile_desk`` needs.
"""

from ._agent import HOTELS, build_agent
from ._model import scripted_model
from ._provider import FakeHotelProvider
from ._service import compile_desk

__all__ = ["HOTELS", "FakeHotelProvider", "build_agent", "compile_desk", "scripted_model"]
