"""An uncertain write is answered with the ledger's own receipt, not a stand-in.

The ledger attaches its receipt to ``EffectUncertainError``; the checkpoint keeps that receipt
(as ``uncertain``). An adapter that does not attach it is answered from the ledger when the
step ends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import pytest
from pydantic import JsonValue

from intention_kernel.contracts import (
    DurabilityStore,
    EffectIdentity,
    EffectReceipt,
    EffectUncertainError,
    ReceiptStatus,
    TurnScope,
)
from intention_kernel.durability._ledger import uncertain_error
from intention_kernel.kernel import (
    CapabilityContext,
    ConfirmationAnswer,
    ConfirmationMode,
    EffectKind,
    TurnInfo,
)
from intention_kernel.kernel._context import uncertain_copy

from .writes import accept, payments_world

T = TypeVar("T")
KEY = "payments.charge:order:42"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _receipt(status: ReceiptStatus, **changes: Any) -> EffectReceipt:
    fields: dict[str, Any] = {
        "id": "rcpt-1",
        "thread_id": "t1",
        "idempotency_key": "payments.charge:k",
        "capability_id": "payments.charge",
        "turn_id": "turn-0",
        "step_id": "step-1",
        "status": status,
        "attempts": 1,
        "created_at": NOW,
        "updated_at": NOW,
    }
    return EffectReceipt(**{**fields, **changes})


class _Raising:
    """A scope whose every effect ends with the given error."""

    def __init__(self, error: EffectUncertainError) -> None:
        self.error = error

    async def run_effect(self, effect: EffectIdentity, operation: Any, **options: Any) -> Any:
        raise self.error


def _context(scope: object) -> CapabilityContext:
    return CapabilityContext(
        scope=cast(TurnScope, scope),
        capability_id="payments.charge",
        effect=EffectKind.WRITE,
        step_id="step-1",
        execution_id="exec-1",
        turn=TurnInfo("t1", "turn-1", "trace-1", "", None),
        ports={},
        facts={},
        host_context={},
        events=None,  # type: ignore[arg-type]
        deadline=0.0,
        confirmation=ConfirmationMode.CAPABILITY,
        answer=ConfirmationAnswer("ia-1", "yes", {}, None, NOW.isoformat(), "d"),
    )


async def _never(authority: object) -> JsonValue:
    raise AssertionError("the scope decides; the operation is not called here")


def test_the_ledger_attaches_its_receipt() -> None:
    receipt = _receipt(ReceiptStatus.UNCERTAIN, error="raised ConnectionResetError")
    error = uncertain_error(receipt)
    assert error.receipt is receipt
    assert error.context["receipt_id"] == "rcpt-1"


def test_the_copy_is_always_uncertain_and_keeps_no_value() -> None:
    uncertain = _receipt(ReceiptStatus.UNCERTAIN, error="raised TimeoutError")
    assert uncertain_copy(uncertain) is uncertain
    unrecorded = _receipt(ReceiptStatus.COMPLETED, value={"id": 1}, error="not recorded")
    copy = uncertain_copy(unrecorded)
    assert copy.status is ReceiptStatus.UNCERTAIN and copy.value is None
    assert copy.error == "not recorded" and copy.id == "rcpt-1" and copy.turn_id == "turn-0"
    assert uncertain_copy(_receipt(ReceiptStatus.PREPARED)).error == "the outcome is not known"


async def test_the_context_keeps_the_receipt_the_error_carries() -> None:
    prepared = _receipt(ReceiptStatus.PREPARED)
    context = _context(_Raising(EffectUncertainError(receipt=prepared)))
    with pytest.raises(EffectUncertainError):
        await context.run_effect("k", _never)
    assert context.receipts == [uncertain_copy(prepared)]
    assert context.interrupted == ()


async def test_without_a_receipt_the_key_is_read_back_when_the_step_ends() -> None:
    context = _context(_Raising(EffectUncertainError(context={"receipt_id": "rcpt-1"})))
    with pytest.raises(EffectUncertainError):
        await context.run_effect("k", _never)
    assert context.receipts == []
    assert context.interrupted == ("payments.charge:k",)


async def test_the_checkpoint_keeps_the_ledgers_receipt_across_turns(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    payments.lose_response = 1
    proposed = await world.run("turn-1", "charge 42")
    lost = await world.run("turn-2", "", selection=accept(proposed))
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None and stored.status is ReceiptStatus.UNCERTAIN
    [copy] = lost.checkpoint.receipts
    kept = ("id", "turn_id", "step_id", "created_at", "attempts", "error", "status")
    assert {f: getattr(copy, f) for f in kept} == {f: getattr(stored, f) for f in kept}
    # Asked again in a later turn: the ledger refuses at once, and its receipt (of turn-2)
    # is what the checkpoint keeps, not one made up for turn-4.
    await world.run("turn-3", "charge 42")
    again = await world.run("turn-4", "yes")
    assert [s.status for s in again.response.steps] == ["uncertain"]
    assert again.checkpoint.receipts == [stored]
    assert payments.calls == [KEY]


class _WithoutReceipts:
    """An adapter written before errors carried the receipt: it raises them without one."""

    def __init__(self, inner: DurabilityStore) -> None:
        self.inner = inner

    async def with_turn(
        self,
        thread_id: str,
        turn_id: str,
        operation: Callable[[TurnScope], Awaitable[T]],
        *,
        request_fingerprint: str | None = None,
    ) -> T:
        async def stripped(scope: TurnScope) -> T:
            return await operation(cast(TurnScope, _StrippedScope(scope)))

        return await self.inner.with_turn(
            thread_id, turn_id, stripped, request_fingerprint=request_fingerprint
        )


class _StrippedScope:
    def __init__(self, scope: TurnScope) -> None:
        self._scope = scope

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scope, name)

    async def run_effect(self, effect: EffectIdentity, operation: Any, **options: Any) -> Any:
        try:
            return await self._scope.run_effect(effect, operation, **options)
        except EffectUncertainError as exc:
            raise EffectUncertainError(exc.message, context=exc.context) from None


async def test_an_error_without_a_receipt_is_answered_from_the_ledger(
    durability: DurabilityStore,
) -> None:
    world, payments = payments_world(durability)
    world.agent._durability = cast(DurabilityStore, _WithoutReceipts(durability))
    payments.lose_response = 1
    proposed = await world.run("turn-1", "charge 42")
    lost = await world.run("turn-2", "", selection=accept(proposed))
    assert "being verified" in lost.response.text
    assert [s.status for s in lost.response.steps] == ["uncertain"]
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None and stored.status is ReceiptStatus.UNCERTAIN
    assert lost.checkpoint.receipts == [stored]
