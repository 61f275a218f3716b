"""A two-minute tour of the durability contract: ``python -m intention_kernel.demo``.

It charges a card inside a durable turn, retries the same turn (replayed: no second charge),
reuses the charge key in a later turn (deduplicated), then loses a provider response
(``uncertain``: never retried blindly) and reconciles it as an operator would.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable

from pydantic import JsonValue

from .contracts import (
    DurabilityStore,
    DurableTurnResult,
    EffectAuthority,
    EffectIdentity,
    EffectOperation,
    EffectUncertainError,
    KernelCheckpoint,
    Message,
    ReceiptStatus,
    TurnScope,
)
from .testing import MemoryDurability

provider_calls: Counter[str] = Counter()


async def charge(authority: EffectAuthority) -> JsonValue:
    provider_calls[authority.idempotency_key] += 1
    return {"charge_id": f"ch_{authority.receipt_id[-6:]}", "amount": 4200}


async def lost_response(authority: EffectAuthority) -> JsonValue:
    provider_calls[authority.idempotency_key] += 1
    raise ConnectionResetError("connection reset after the request was sent")


def turn_operation(
    key: str, call: EffectOperation
) -> Callable[[TurnScope], Awaitable[tuple[DurableTurnResult, bool]]]:
    async def operation(scope: TurnScope) -> tuple[DurableTurnResult, bool]:
        if scope.prior_result is not None:
            return scope.prior_result, True
        effect = await scope.run_effect(
            EffectIdentity(f"payments.charge:{key}", "payments.charge"),
            call,
        )
        revision = 1 if scope.checkpoint is None else scope.checkpoint.revision + 1
        checkpoint = KernelCheckpoint(
            revision=revision,
            agent_fingerprint="demo",
            messages=[Message(role="assistant", text=f"charged {key}", turn_id=scope.turn_id)],
        )
        result = DurableTurnResult(
            thread_id=scope.thread_id,
            turn_id=scope.turn_id,
            trace_id=f"trace-{scope.turn_id}",
            response={"charge": effect.value, "effect_replayed": effect.replayed},
            checkpoint=checkpoint,
        )
        await scope.commit(result)
        return result, False

    return operation


async def run_turn(store: DurabilityStore, turn_id: str, key: str, call: EffectOperation) -> None:
    result, replayed = await store.with_turn("thread-1", turn_id, turn_operation(key, call))
    print(f"  {turn_id}: replayed={replayed} response={result.response}")


async def main() -> None:
    store = MemoryDurability()
    print("1. A turn charges a card (the effect is recorded before and after the call):")
    await run_turn(store, "turn-1", "order-17", charge)
    print("2. The client retries the same turn id: the stored result comes back, nothing runs:")
    await run_turn(store, "turn-1", "order-17", charge)
    print("3. A later turn asks for the same business operation: the receipt is replayed:")
    await run_turn(store, "turn-2", "order-17", charge)
    print("4. A provider response is lost after the write: the receipt becomes uncertain:")
    try:
        await run_turn(store, "turn-3", "order-18", lost_response)
    except EffectUncertainError as exc:
        print(f"  refused: {exc.code} - {exc.message}")
    try:
        await run_turn(store, "turn-3", "order-18", charge)
    except EffectUncertainError as exc:
        print(f"  retry refused again without calling the provider: {exc.code}")
    print("5. An operator checks the provider and reconciles:")
    for receipt in await store.list_receipts(status=ReceiptStatus.UNCERTAIN):
        print(f"  uncertain: {receipt.idempotency_key} (receipt {receipt.id})")
    await store.reconcile(
        "thread-1",
        "payments.charge:order-18",
        "completed",
        value={"charge_id": "ch_found", "amount": 990},
        note="charge found in the provider dashboard",
        actor="ops@example.com",
    )
    await run_turn(store, "turn-3", "order-18", charge)
    print(f"Provider calls per key: {dict(provider_calls)} (never twice for one key)")


if __name__ == "__main__":
    asyncio.run(main())
