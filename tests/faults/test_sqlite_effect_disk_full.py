"""A disk that fills up in the middle of an effect, on SQLite (a real tmpfs, so root): what the
caller and an operator see is exactly what is known.

- Full when ``prepared`` is written: SQLite rolls the transaction back (``STORE_FULL``, nothing
  written), the provider is not called, nothing is listed as uncertain, and once space is freed
  a redelivery calls it once.
- Full when the outcome is written, after the provider answered: the caller gets
  ``EffectUncertainError`` (the value in hand could not be kept), the receipt stays ``prepared``
  and is listed as uncertain, and a redelivery never calls the provider again.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import (
    DurabilityError,
    EffectAuthority,
    EffectUncertainError,
    ErrorCode,
    ReceiptStatus,
    TurnScope,
)
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing.conformance import Provider, commit_simple, effect, make_result

from .fault_support import integrity_ok
from .test_sqlite_bad_input import run, tmpfs

KEY = effect("charge-1").idempotency_key


def fill(path: Path, db: Path) -> Path:
    """Empty the WAL (its next frame needs new space), then fill the file system to the byte."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0, "the WAL could not be emptied"
    finally:
        conn.close()
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 1 << 16, 1 << 12, 1 << 9, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


async def charge_then_commit(store: SQLiteDurability, provider: Provider) -> JsonValue:
    async def operation(scope: TurnScope) -> JsonValue:
        done = await scope.run_effect(effect("charge-1"), provider.returning({"charge": "ch_1"}))
        await scope.commit(make_result(scope, {"charge": done.value}))
        return done.value

    return await store.with_turn("t1", "turn-1", operation)


def test_a_full_disk_at_prepared_calls_nothing_and_a_redelivery_calls_once(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "mnt", "2m") as mount:
        db = mount / "s.db"
        provider = Provider()

        async def main() -> None:
            store = await SQLiteDurability.open(db)
            try:
                await commit_simple(store, "t1", "turn-0")
                filler: list[Path] = []

                async def operation(scope: TurnScope) -> None:
                    filler.append(fill(mount, db))  # the lease is held: the next write is ours
                    await scope.run_effect(
                        effect("charge-1"), provider.returning({"charge": "ch_1"})
                    )

                with pytest.raises(DurabilityError) as caught:
                    await store.with_turn("t1", "turn-1", operation)
                assert caught.value.code is ErrorCode.STORE_FULL
                assert provider.total() == 0
                assert await store.get_receipt("t1", KEY) is None  # nothing was written
                assert await store.list_receipts(status=ReceiptStatus.UNCERTAIN) == []
                filler[0].unlink()
                assert await charge_then_commit(store, provider) == {"charge": "ch_1"}
                assert provider.calls[KEY] == 1
                receipt = await store.get_receipt("t1", KEY)
                assert receipt is not None and receipt.status is ReceiptStatus.COMPLETED
            finally:
                await store.close()

        run(main())
        assert integrity_ok(db)


def test_a_full_disk_after_the_provider_answered_is_uncertain_and_never_called_again(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "mnt", "2m") as mount:
        db = mount / "s.db"
        provider = Provider()

        async def main() -> None:
            store = await SQLiteDurability.open(db)
            store.record_retry_seconds = 0.2
            try:
                await commit_simple(store, "t1", "turn-0")
                filler: list[Path] = []
                answer = provider.returning({"charge": "ch_1"})

                async def charge(authority: EffectAuthority) -> JsonValue:
                    value = await answer(authority)
                    filler.append(fill(mount, db))  # the provider answered; now the disk is full
                    return value

                async def operation(scope: TurnScope) -> None:
                    await scope.run_effect(effect("charge-1"), charge)

                with pytest.raises(EffectUncertainError):
                    await store.with_turn("t1", "turn-1", operation)
                assert provider.calls[KEY] == 1
                receipt = await store.get_receipt("t1", KEY)
                assert receipt is not None and receipt.status is ReceiptStatus.PREPARED
                listed = await store.list_receipts(status=ReceiptStatus.UNCERTAIN)
                assert [r.idempotency_key for r in listed] == [KEY]
                filler[0].unlink()
                with pytest.raises(EffectUncertainError):
                    await charge_then_commit(store, provider)
                assert provider.calls[KEY] == 1  # never called again until reconciled
            finally:
                await store.close()

        run(main())
        assert integrity_ok(db)
