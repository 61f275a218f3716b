"""Stage: receipt refresh, first of the turn (before projection). Operators' reconciliations
reach the checkpoint.

Why: the checkpoint keeps copies of effect receipts, and an ``uncertain`` one is only resolved
in the ledger (``store.reconcile``), outside any turn. At the start of each turn the kernel
reads, through ``TurnScope.receipts``, the ledger's receipts for exactly the keys its checkpoint
holds as uncertain (no read when there are none). A copy now ``completed`` or ``failed`` replaces
the uncertain one, an ``effect.resolved`` audit event is emitted, and the user is told once, in
this turn's answer, how the write ended ("went through after all" or "did not go through").
A scope without ``receipts`` (an adapter written before it existed) is left as it was: its
copies refresh when the same key is used again.
"""

from __future__ import annotations

from ...contracts.events import EventCategory
from ...contracts.receipts import EffectReceipt, ReceiptStatus
from .state import TurnState

__all__ = ["FAILED_UPDATE", "VERIFIED_UPDATE", "refresh_receipts"]

VERIFIED_UPDATE = "Update: {description}: it went through after all (verified)."
FAILED_UPDATE = (
    "Update: {description}: it did not go through and nothing was changed; "
    "you can ask me to try again."
)
_RESOLVED = {ReceiptStatus.COMPLETED: VERIFIED_UPDATE, ReceiptStatus.FAILED: FAILED_UPDATE}


async def refresh_receipts(state: TurnState) -> None:
    checkpoint = state.checkpoint
    if checkpoint is None:
        return
    keys = [r.idempotency_key for r in checkpoint.receipts if r.status is ReceiptStatus.UNCERTAIN]
    read = getattr(state.scope, "receipts", None)
    if not keys or read is None:
        return
    current: dict[str, EffectReceipt] = {r.idempotency_key: r for r in await read(keys)}
    refreshed: list[EffectReceipt] = []
    resolved: list[EffectReceipt] = []
    for copy in checkpoint.receipts:
        fresh = current.get(copy.idempotency_key)
        if (
            copy.status is ReceiptStatus.UNCERTAIN
            and fresh is not None
            and fresh.status in _RESOLVED
        ):
            refreshed.append(fresh)
            resolved.append(fresh)
        else:
            refreshed.append(copy)
    if not resolved:
        return
    state.checkpoint = checkpoint.model_copy(update={"receipts": refreshed})
    for receipt in resolved:
        cap = state.runtime.capabilities.get(receipt.capability_id)
        description = (cap.description if cap else receipt.capability_id).rstrip(".")
        state.updates.append(_RESOLVED[receipt.status].format(description=description))
        state.recorder.emit(
            "effect.resolved",
            {
                "capability_id": receipt.capability_id,
                "idempotency_key": receipt.idempotency_key,
                "receipt_id": receipt.id,
                "status": str(receipt.status.value),
            },
            cause=state.start_event,
            category=EventCategory.AUDIT,
        )
