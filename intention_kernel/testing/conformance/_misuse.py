"""Bad input and misuse: typed errors with stable codes, and nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from ...contracts.durability import TurnScope
from ...contracts.errors import ErrorCode, InvalidIdError, InvalidInputError, UsageError
from ...contracts.receipts import EffectIdentity
from ._support import ConformanceHarness, Provider, conformance_test, make_result

__all__ = ["Misuse"]

BAD_IDS: list[Any] = [
    "",
    "   ",
    None,
    42,
    b"bytes",
    "a" * 257,
    "nul\x00char",
    "tab\there",
    "\ud800",
    "\u200b",
    "t\u202ex",
    "\u00a0",
]


async def _noop(scope: TurnScope) -> None:
    raise AssertionError("must not run")


class Misuse:
    @conformance_test
    async def test_bad_thread_and_turn_ids_are_refused_before_any_write(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        for bad in BAD_IDS:
            with pytest.raises(InvalidIdError) as caught:
                await store.with_turn(bad, "turn-1", _noop)
            assert caught.value.code == ErrorCode.INVALID_THREAD_ID
            with pytest.raises(InvalidIdError) as caught:
                await store.with_turn("t1", bad, _noop)
            assert caught.value.code == ErrorCode.INVALID_TURN_ID
        assert await store.read_outbox() == []
        assert await store.list_receipts() == []

    @conformance_test
    async def test_bad_idempotency_keys_are_refused(self, harness: ConformanceHarness) -> None:
        for bad in [*(b for b in BAD_IDS if b != "a" * 257), "k" * 513]:
            with pytest.raises(InvalidIdError) as caught:
                EffectIdentity(bad, "payments.charge")
            assert caught.value.code == ErrorCode.INVALID_IDEMPOTENCY_KEY
        store = await harness.open()
        provider = Provider()

        async def body(scope: TurnScope) -> None:
            await scope.run_effect("not-an-identity", provider.returning(1))  # type: ignore[arg-type]

        with pytest.raises(InvalidInputError):
            await store.with_turn("t1", "turn-1", body)
        assert provider.total() == 0

    @conformance_test
    async def test_scope_used_after_the_turn_ended_is_refused(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        provider = Provider()
        kept: list[TurnScope] = []

        async def leak(scope: TurnScope) -> None:
            kept.append(scope)

        await store.with_turn("t1", "turn-1", leak)
        with pytest.raises(UsageError) as caught:
            await kept[0].commit(make_result(kept[0]))
        assert caught.value.code == ErrorCode.SCOPE_CLOSED
        with pytest.raises(UsageError):
            await kept[0].run_effect(EffectIdentity("k", "c"), provider.returning(1))
        assert provider.total() == 0
        assert await store.get_turn("t1", "turn-1") is None

    @conformance_test
    async def test_bad_reconcile_arguments_are_refused(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        cases: list[dict[str, Any]] = [
            {"outcome": "maybe", "note": "n", "actor": "a"},
            {"outcome": "completed", "value": 1, "note": "  ", "actor": "a"},
            {"outcome": "completed", "value": 1, "note": "n", "actor": ""},
            {"outcome": "completed", "note": "n", "actor": "a"},
            {"outcome": "completed", "value": 1, "note": "n", "actor": "a", "correct": "yes"},
            {"outcome": "not_applied", "value": 3, "note": "n", "actor": "a"},
            {"outcome": "completed", "value": float("nan"), "note": "n", "actor": "a"},
        ]
        for case in cases:
            outcome = case.pop("outcome")
            with pytest.raises(InvalidInputError):
                await store.reconcile("t1", "payments.charge:k1", outcome, **case)
        with pytest.raises(InvalidInputError):
            await store.list_receipts(limit=0)
        assert await store.reconciliations() == []

    @conformance_test
    async def test_bad_request_fingerprint_is_refused(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        bad_values: list[Any] = ["", 12, "f" * 257]
        for bad in bad_values:
            with pytest.raises(InvalidInputError):
                await store.with_turn("t1", "turn-1", _noop, request_fingerprint=bad)
