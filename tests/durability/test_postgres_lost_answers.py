"""Lost answers on PostgreSQL: a TCP proxy between the store and the server forwards the
statement writing ``prepared`` and drops the server's answer (the write committed, the client
sees a lost connection). The provider is provably not called yet: the store finds its own
``prepared`` and calls it once, instead of leaving a receipt the next delivery would report
as uncertain ("being verified") for a payment that never happened.

If the server stays unreachable for longer than ``record_retry_seconds``, nothing can be
recorded: the caller gets ``STORE_UNAVAILABLE`` and the receipt stays ``prepared`` (listed as
uncertain), which is all the store can know.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import (
    DurabilityError,
    EffectUncertainError,
    ErrorCode,
    ReceiptStatus,
    TurnScope,
)
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.testing.conformance import Provider, effect, make_events, make_result

from ._lossy_proxy import LossyProxy
from .conftest import open_store

PREPARED = b'"status":"prepared"'
KEY = effect("charge-1").idempotency_key


def through(dsn: str, proxy: LossyProxy) -> str:
    parts = urlsplit(dsn)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}"))


def target(dsn: str) -> tuple[str, int]:
    parts = urlsplit(dsn)
    return parts.hostname or "127.0.0.1", parts.port or 5432


async def deliver(store: PostgresDurability, provider: Provider) -> JsonValue:
    """One delivery of the turn; a retryable store error is redelivered, as a worker does."""

    async def operation(scope: TurnScope) -> JsonValue:
        if scope.prior_result is not None:
            return scope.prior_result.response
        done = await scope.run_effect(effect("charge-1"), provider.returning({"charge": "ch_1"}))
        result = make_result(scope, {"charge": done.value})
        await scope.commit(result, make_events(scope))
        return result.response

    for _ in range(3):
        try:
            return await store.with_turn("t1", "turn-1", operation)
        except DurabilityError as exc:
            if not exc.retryable:
                raise
    raise AssertionError("the turn did not finish in three deliveries")


async def test_a_lost_answer_to_prepared_calls_the_provider_once(dsn: str, schema: str) -> None:
    await (await open_store(dsn, schema)).close()  # migrated directly, not through the proxy
    async with LossyProxy(*target(dsn)) as proxy:
        store = await PostgresDurability.open(through(dsn, proxy), schema=schema, max_size=2)
        provider = Provider()
        try:
            proxy.drop_answer_to(PREPARED)
            response = await deliver(store, provider)
            assert proxy.dropped == 1  # the prepared write's answer was really lost
            assert response == {"charge": {"charge": "ch_1"}}
            assert provider.calls[KEY] == 1
            receipt = await store.get_receipt("t1", KEY)
            assert receipt is not None and receipt.status is ReceiptStatus.COMPLETED
            assert await store.list_receipts(status=ReceiptStatus.UNCERTAIN) == []
            stored = await store.get_turn("t1", "turn-1")
            assert stored is not None and stored.response == response
        finally:
            await store.close()


async def test_a_store_unreachable_after_a_lost_answer_leaves_what_is_known(
    dsn: str, schema: str
) -> None:
    await (await open_store(dsn, schema)).close()
    async with LossyProxy(*target(dsn)) as proxy:
        store = await PostgresDurability.open(
            through(dsn, proxy), schema=schema, max_size=2, lease_ttl=1.0
        )
        store.record_retry_seconds = 0.5
        provider = Provider()

        async def operation(scope: TurnScope) -> None:
            proxy.drop_answer_to(PREPARED)
            proxy.refuse = True  # and the server stays unreachable from here on
            await scope.run_effect(effect("charge-1"), provider.returning({"charge": "ch_1"}))

        try:
            with pytest.raises(DurabilityError) as caught:
                await store.with_turn("t1", "turn-1", operation)
            assert caught.value.code is ErrorCode.STORE_UNAVAILABLE and caught.value.retryable
            assert proxy.dropped == 1 and proxy.refused > 0
            assert provider.total() == 0
        finally:
            await store.close()
    # The prepared did land; no one can record that it was never called, so every later
    # reader sees it as uncertain, and a redelivery does not call the provider.
    direct = await open_store(dsn, schema)
    try:
        await asyncio.sleep(1.1)  # the lost lease expires
        listed = await direct.list_receipts(status=ReceiptStatus.UNCERTAIN)
        assert [r.idempotency_key for r in listed] == [KEY]
        with pytest.raises(EffectUncertainError):
            await deliver(direct, provider)
        assert provider.total() == 0
    finally:
        await direct.close()
