"""``compile_desk(store)``: the travel desk bound to a store, ready to serve over HTTP.

Why a factory of the store: ``intention-kernel serve --agent module:attribute --store URL``
opens the store itself and hands it to the factory, so the turns it runs and the reads and
readiness checks it answers use the same store.
"""

from __future__ import annotations

from ...contracts.durability import Durability
from ...contracts.gateway import ModelGateway
from ...kernel._kernel import Kernel
from ...kernel._runtime import CompiledAgent
from ._agent import build_agent, receipt_hotel_key
from ._model import scripted_model
from ._provider import FakeHotelProvider

__all__ = ["compile_desk"]


def compile_desk(
    store: Durability,
    *,
    model: ModelGateway | None = None,
    provider: FakeHotelProvider | None = None,
) -> CompiledAgent:
    """The travel desk on ``store``, with the scripted model and a fake provider by default;
    its ``provider_key`` gives the served inspector the key the provider received."""
    kernel = Kernel(
        durability=store,
        model=model if model is not None else scripted_model(),
        ports={"hotels": provider if provider is not None else FakeHotelProvider()},
    )
    return kernel.compile(build_agent(), provider_key=receipt_hotel_key)
