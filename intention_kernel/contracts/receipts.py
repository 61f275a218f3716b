"""Effect receipts: the durable record of one external write, keyed by its idempotency key.

A receipt moves through these states (the ledger rules live in ``durability._ledger``)::

    (none) ──prepare──> PREPARED ──returned──> COMPLETED      replayed, never called again
                           │  ├─EffectNotAppliedError─> FAILED ──retry──> PREPARED (same id)
                           │  └─anything else────────> UNCERTAIN        fail closed
                           └─found at start (crash)──> UNCERTAIN
    UNCERTAIN ──reconcile(completed)──> COMPLETED
    UNCERTAIN ──reconcile(not_applied)─> FAILED
    reconciled COMPLETED | FAILED ──reconcile(..., correct=True)──> COMPLETED | FAILED

A receipt keeps the fingerprint of the request it was first run with (``request_fingerprint``):
the same key with another request is ``EFFECT_REQUEST_MISMATCH``, never a replay of the first
result.

A ``prepared`` receipt while no live holder has the thread's lease was interrupted (its turn
ended before recording the outcome); it is listed and counted as uncertain, as stored, and
``reconcile`` resolves it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum, StrEnum
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from .codec import StoredJson
from .ids import validate_capability_id, validate_id, validate_idempotency_key, validate_step_id

__all__ = [
    "NO_VALUE",
    "EffectAuthority",
    "EffectExecution",
    "EffectIdentity",
    "EffectReceipt",
    "NoValue",
    "ReceiptStatus",
    "ReconcileOutcome",
    "ReconciliationRecord",
]


class ReceiptStatus(StrEnum):
    """Where one external write stands in the effect ledger (see the diagram above)."""

    PREPARED = "prepared"
    """Durably recorded before the provider call; if found at the start of a call, or while
    no one holds the thread's lease (interrupted), the attempt ended mid-call and the outcome
    is unknown."""
    COMPLETED = "completed"
    """The provider returned; the stored value is replayed for every later call."""
    FAILED = "failed"
    """The host proved the write did not happen (``EffectNotAppliedError``); a retry may run."""
    UNCERTAIN = "uncertain"
    """The write may have happened; never retried automatically, reconciled by an operator."""


ReconcileOutcome = Literal["completed", "not_applied"]
"""An operator's finding for an uncertain write: it happened, or it provably did not."""


class NoValue(Enum):
    """The type of ``NO_VALUE``."""

    NO_VALUE = "no_value"


NO_VALUE: Final = NoValue.NO_VALUE
"""``reconcile``'s default ``value``: none given. A ``completed`` reconciliation refuses it,
so the provider's value is always stated (``value=None`` states JSON ``null``)."""


@dataclass(frozen=True, slots=True)
class EffectIdentity:
    """What identifies one logical write: the key is the deduplication identity.

    ``idempotency_key`` is the full ledger key (the kernel prefixes the capability id);
    ``step_id`` is receipt metadata only. ``request_fingerprint`` is set by
    ``run_effect(..., request=...)`` (the digest of what the write asks for); the ledger
    refuses the key for another request (``EFFECT_REQUEST_MISMATCH``).
    """

    idempotency_key: str
    capability_id: str
    step_id: str | None = None
    request_fingerprint: str | None = None

    def __post_init__(self) -> None:
        validate_idempotency_key(self.idempotency_key)
        validate_capability_id(self.capability_id)
        if self.step_id is not None:
            validate_step_id(self.step_id)
        if self.request_fingerprint is not None:
            validate_id(self.request_fingerprint, "request_fingerprint")


@dataclass(frozen=True, slots=True)
class EffectAuthority:
    """Handed to the effect operation: pass ``idempotency_key`` to the provider.

    ``receipt_id`` is allocated before the call and stays the same across retries of a
    ``failed`` receipt, so it can also serve as a provider-side reference.
    """

    idempotency_key: str
    receipt_id: str


class EffectReceipt(BaseModel):
    """The durable record of one external write, keyed by its idempotency key.

    The ledger's copy rules; a checkpoint keeps copies of the receipts that matter now (every
    ``uncertain`` one until an operator reconciles it). ``value`` is the stored result of a
    ``completed`` write, replayed for every later call with the same key; ``error`` is a safe
    reason for a ``failed`` or ``uncertain`` one; ``attempts`` counts the calls started under
    this receipt (a ``failed`` one may be retried and keeps its ``id``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    thread_id: str
    idempotency_key: str
    capability_id: str
    turn_id: str
    step_id: str | None = None
    status: ReceiptStatus
    value: StoredJson = None
    error: str | None = Field(default=None, description="safe reason for failed/uncertain")
    attempts: int = Field(ge=1)
    created_at: datetime
    updated_at: datetime
    request_fingerprint: str | None = None
    """SHA-256 of the canonical JSON of the request the effect was first run with
    (``run_effect(..., request=...)``); ``None`` when none was given (or written before)."""


@dataclass(frozen=True, slots=True)
class EffectExecution:
    """The result of ``run_effect``: the stored value and its receipt.

    ``value`` is always the stored form (after the JSON round trip), so a first run and a
    replay return equal values. ``replayed`` is true when the provider was not called.
    """

    value: JsonValue
    receipt: EffectReceipt
    replayed: bool


class ReconciliationRecord(BaseModel):
    """Audit entry for one operator resolution of an uncertain receipt, or for a correction
    of an earlier resolution (``supersedes`` names the record it corrects)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    thread_id: str
    idempotency_key: str
    receipt_id: str
    previous_status: ReceiptStatus
    outcome: ReconcileOutcome
    value: StoredJson = None
    note: str
    actor: str
    recorded_at: datetime
    supersedes: str | None = None
