"""A real lost write on SQLite: the file stays locked by another connection past ``busy_timeout``
right after the provider answered, so the write recording ``completed`` fails with STORE_BUSY.

Short lock: the write is retried and lands; the value in hand is kept, the provider was called
once. Lock longer than ``record_retry_seconds``: the caller gets ``EffectUncertainError``, the
receipt stays ``prepared`` and is listed as uncertain, reconcilable, never called again.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import (
    EffectAuthority,
    EffectUncertainError,
    ReceiptStatus,
    TurnScope,
)
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing.conformance import Provider, effect


def lock_file_for(path: Path, seconds: float) -> threading.Thread:
    """Hold SQLite's write lock from another connection for ``seconds`` (a busy neighbour)."""
    taken = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        taken.set()
        threading.Event().wait(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait()
    return thread


async def run_with_busy_file(
    store: SQLiteDurability, provider: Provider, seconds: float
) -> list[threading.Thread]:
    holders: list[threading.Thread] = []

    async def charge(authority: EffectAuthority) -> JsonValue:
        value = await provider.returning({"charge": "ch_1"})(authority)
        holders.append(await asyncio.to_thread(lock_file_for, store.path, seconds))
        return value

    async def operation(scope: TurnScope) -> JsonValue:
        return (await scope.run_effect(effect("k"), charge)).value

    try:
        await store.with_turn("t", "turn-1", operation)
    finally:
        for holder in holders:
            await asyncio.to_thread(holder.join)
    return holders


async def test_a_busy_file_after_the_provider_answered_is_waited_out(tmp_path: Path) -> None:
    store = await SQLiteDurability.open(tmp_path / "s.db", busy_timeout=0.1)
    provider = Provider()
    try:
        await run_with_busy_file(store, provider, seconds=0.6)
        receipt = await store.get_receipt("t", effect("k").idempotency_key)
        assert receipt is not None and receipt.status is ReceiptStatus.COMPLETED
        assert receipt.value == {"charge": "ch_1"}
        assert provider.total() == 1
    finally:
        await store.close()


async def test_a_write_lost_for_good_leaves_an_uncertain_receipt(tmp_path: Path) -> None:
    store = await SQLiteDurability.open(tmp_path / "s.db", busy_timeout=0.1)
    store.record_retry_seconds = 0.3
    provider = Provider()
    key = effect("k").idempotency_key
    try:
        with pytest.raises(EffectUncertainError) as raised:
            await run_with_busy_file(store, provider, seconds=1.0)
        assert raised.value.context["reason"] == "the outcome could not be recorded"
        listed = await store.list_receipts(status=ReceiptStatus.UNCERTAIN, thread_id="t")
        assert [(r.idempotency_key, r.status) for r in listed] == [(key, ReceiptStatus.PREPARED)]

        async def again(scope: TurnScope) -> None:
            await scope.run_effect(effect("k"), provider.returning({"charge": "ch_2"}))

        with pytest.raises(EffectUncertainError):
            await store.with_turn("t", "turn-2", again)
        assert provider.total() == 1
        resolved = await store.reconcile(
            "t", key, "completed", value={"charge": "ch_1"}, note="seen at the PSP", actor="ops"
        )
        assert resolved.status is ReceiptStatus.COMPLETED
    finally:
        await store.close()
