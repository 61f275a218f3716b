"""The travel desk as ``intention-kernel serve --agent tests.inspector.served_desk:lossy_desk``
starts it: its provider applies every booking, records the key it received in the file named by
``IK_TEST_PROVIDER_KEYS`` and loses the response (the write is uncertain)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from intention_kernel.contracts import Durability
from intention_kernel.examples.travel_desk import FakeHotelProvider, compile_desk
from intention_kernel.kernel import CompiledAgent


def _record(key: str) -> None:
    with open(os.environ["IK_TEST_PROVIDER_KEYS"], "a", encoding="utf-8") as log:
        log.write(key + "\n")


class LossyProvider(FakeHotelProvider):
    async def book(self, quote: dict[str, Any], *, idempotency_key: str) -> dict[str, Any]:
        await asyncio.to_thread(_record, idempotency_key)
        self.lose_next_response = True
        return await super().book(quote, idempotency_key=idempotency_key)


def lossy_desk(store: Durability) -> CompiledAgent:
    return compile_desk(store, provider=LossyProvider())
