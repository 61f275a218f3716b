"""The fault kit's provider check (I5a) against the real store: it reads the receipt after the
call arrived, so a slow read (a server restarting) finds the receipt moved on by the worker.

This is the race behind ``test_postgres_restarted_under_load``'s rare ``I5a`` reports: the
worker's lease was lost mid-call (``LEASE_LOST``), its turn cancelled and the receipt made
``uncertain`` before the provider's read got through. A committed ``prepared`` of the call's
receipt still proves I5a; a call with no such receipt is still reported.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from intention_kernel.contracts import EffectAuthority, ReceiptStatus, TurnScope
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.testing.conformance import effect

from .kit import ProviderProcess, call_provider


async def checked(provider: ProviderProcess, count: int) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        stats = await provider.astats()
        if stats["checked"] >= count or time.monotonic() > deadline:
            return stats
        await asyncio.sleep(0.05)


async def test_a_receipt_moved_on_before_the_check_read_it_is_not_a_violation(
    dsn: str, schema: str
) -> None:
    store = await PostgresDurability.open(dsn, schema=schema, max_size=2)
    with ProviderProcess(dsn, schema, check_delay=1.0) as provider:
        try:

            async def operation(scope: TurnScope) -> None:
                # The worker gives up on the call in flight (as a lost lease cancels a turn):
                # the engine records ``uncertain`` while the provider has not read it yet.
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.3):
                        await scope.run_effect(
                            effect("k"), lambda a: call_provider(provider.socket, "t1", a)
                        )

            await store.with_turn("t1", "turn-1", operation)
            receipt = await store.get_receipt("t1", effect("k").idempotency_key)
            assert receipt is not None and receipt.status is ReceiptStatus.UNCERTAIN
            stats = await checked(provider, 1)
            assert stats["checked"] == 1
            assert stats["calls"] == {f"t1\t{effect('k').idempotency_key}": 1}
            assert stats["unprepared"] == []
        finally:
            await store.close()


async def test_a_call_without_its_prepared_receipt_is_still_reported(dsn: str, schema: str) -> None:
    store = await PostgresDurability.open(dsn, schema=schema, max_size=2)
    with ProviderProcess(dsn, schema) as provider:
        try:

            async def operation(scope: TurnScope) -> None:
                await scope.run_effect(
                    effect("k"), lambda a: call_provider(provider.socket, "t1", a)
                )

            await store.with_turn("t1", "turn-1", operation)
            stored = await store.get_receipt("t1", effect("k").idempotency_key)
            assert stored is not None
            # No receipt at all, and a receipt that is not this call's (written again).
            await call_provider(provider.socket, "t1", EffectAuthority("other", "rcpt_x"))
            key = effect("k").idempotency_key
            await call_provider(provider.socket, "t1", EffectAuthority(key, "rcpt_other"))
            stats = await checked(provider, 3)
            assert len(stats["unprepared"]) == 2
            assert stats["unprepared"][0].startswith("t1\tother (receipt rcpt_x: stored None")
            assert f"stored completed {stored.id}" in stats["unprepared"][1]
        finally:
            await store.close()
