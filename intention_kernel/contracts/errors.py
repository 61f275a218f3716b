"""Every error the library raises, with a stable code, a safe message and a retry hint.

Callers branch on ``code`` (stable across releases) or on the class, never on the text.
``message`` is safe to show to an end user or log: it never contains payloads, secrets or
driver output. The private cause stays on ``__cause__`` and is never part of ``to_json()``.

Hierarchy::

    KernelError
    ├── InvalidInputError            bad input crossing a public entry point (nothing written)
    │   ├── InvalidIdError           thread/turn ids, idempotency keys, capability ids ...
    │   ├── SerializationError       not JSON, NaN/Infinity, integer out of range, too deep/large
    │   └── SchemaValidationError    a value does not match its declared schema
    ├── ConfigurationError           invalid settings, refused at start
    ├── UsageError                   an API called in the wrong state (scope closed, nested effect)
    ├── DurabilityError              the store could not do what was asked
    │   ├── LeaseLostError           another holder took over the thread: this one is fenced
    │   ├── TurnConflictError        turn id reused, turn already committed, revision conflict
    │   ├── CheckpointCorruptError   a stored document cannot be read back
    │   └── StoreSchemaError         the store's schema is missing or newer than this code
    ├── EffectError
    │   ├── EffectUncertainError     a write may or may not have happened: fail closed
    │   ├── EffectNotAppliedError    raised by a host: the write certainly did not happen
    │   └── EffectConflictError      key used by another capability or another request, or a
    │                                receipt in the wrong state
    ├── CheckpointIncompatibleError  stored checkpoint not loadable by this agent
    ├── AgentCompilationError        an agent definition is invalid (lists every problem)
    ├── ModelGatewayError            the model provider failed or answered nonsense
    ├── TurnTimeoutError             a turn ran past its deadline; it may have committed
    └── FlowControlError             a budget is used up, or no provider slot came in time
"""

from __future__ import annotations

from typing import Any

from ._base_errors import (
    ConfigurationError,
    ErrorCode,
    InvalidIdError,
    InvalidInputError,
    KernelError,
    SerializationError,
)
from .receipts import EffectReceipt

__all__ = [
    "AgentCompilationError",
    "CheckpointCorruptError",
    "CheckpointIncompatibleError",
    "ConfigurationError",
    "DurabilityError",
    "EffectConflictError",
    "EffectError",
    "EffectNotAppliedError",
    "EffectUncertainError",
    "ErrorCode",
    "FlowControlError",
    "InvalidIdError",
    "InvalidInputError",
    "KernelError",
    "LeaseLostError",
    "ModelGatewayError",
    "SchemaValidationError",
    "SerializationError",
    "StoreSchemaError",
    "TurnConflictError",
    "TurnTimeoutError",
    "UsageError",
]

for _lower in (
    ConfigurationError,
    ErrorCode,
    InvalidIdError,
    InvalidInputError,
    KernelError,
    SerializationError,
):
    _lower.__module__ = __name__  # their public home: ``error.type`` names it
del _lower


class SchemaValidationError(InvalidInputError):
    """A value does not match its declared schema."""

    default_code = ErrorCode.SCHEMA_VALIDATION_FAILED
    default_message = "value does not match its schema"


class UsageError(KernelError):
    """An API was called in the wrong state (a closed scope, a nested or refused effect)."""

    default_code = ErrorCode.SCOPE_CLOSED
    default_message = "API used in the wrong state"


class DurabilityError(KernelError):
    """The durable store could not do what was asked."""

    default_code = ErrorCode.STORE_ERROR
    default_message = "the durable store failed"


class LeaseLostError(DurabilityError):
    """Another holder took over the thread; this one is fenced and its write refused."""

    default_code = ErrorCode.LEASE_LOST
    default_message = (
        "the thread lease was lost to another holder; this write was refused "
        "(the turn did not commit); deliver the same turn id again"
    )
    default_retryable = True


class TurnConflictError(DurabilityError):
    """A turn id reused with another request, a turn already committed, a revision conflict."""

    default_code = ErrorCode.TURN_ID_REUSED
    default_message = "turn conflicts with a stored turn"


class CheckpointCorruptError(DurabilityError):
    """A stored document cannot be read back."""

    default_code = ErrorCode.CHECKPOINT_CORRUPT
    default_message = "a stored document cannot be read back"


class StoreSchemaError(DurabilityError):
    """The store's schema is missing or newer than this code."""

    default_code = ErrorCode.STORE_SCHEMA_MISSING
    default_message = "the store schema is missing or not supported"


class EffectError(KernelError):
    """Root of the errors about external writes run through the effect ledger."""

    default_code = ErrorCode.EFFECT_UNCERTAIN
    default_message = "effect error"


class EffectUncertainError(EffectError):
    """A write may or may not have happened: fail closed, never retried automatically.

    ``receipt`` is the ledger's receipt for the write when the ledger raised this error, so
    callers need not read it back; it may be as last written (``prepared``) when the outcome
    could not be recorded, and it is ``None`` when raised elsewhere.
    """

    default_code = ErrorCode.EFFECT_UNCERTAIN
    default_message = (
        "the external write may or may not have happened; it will not be retried automatically"
    )

    def __init__(
        self,
        message: str | None = None,
        *,
        code: ErrorCode | None = None,
        retryable: bool | None = None,
        context: dict[str, Any] | None = None,
        receipt: EffectReceipt | None = None,
    ) -> None:
        super().__init__(message, code=code, retryable=retryable, context=context)
        self.receipt: EffectReceipt | None = receipt


class EffectNotAppliedError(EffectError):
    """Raised by host code when it can prove the external write did not happen.

    Only this error records the receipt as ``failed`` and permits a later retry.
    """

    default_code = ErrorCode.EFFECT_NOT_APPLIED
    default_message = "the external write was not applied"


class EffectConflictError(EffectError):
    """An idempotency key bound to another capability (``IDEMPOTENCY_KEY_COLLISION``) or to
    another request (``EFFECT_REQUEST_MISMATCH``), or a receipt in the wrong state."""

    default_code = ErrorCode.IDEMPOTENCY_KEY_COLLISION
    default_message = "the idempotency key is bound to another capability"


class CheckpointIncompatibleError(KernelError):
    """The stored checkpoint was written by another agent contract or a newer schema."""

    default_code = ErrorCode.CHECKPOINT_INCOMPATIBLE
    default_message = "the stored checkpoint is not compatible with this agent"


class AgentCompilationError(KernelError):
    """An agent definition is invalid; ``context["problems"]`` lists every problem."""

    default_code = ErrorCode.AGENT_COMPILATION_FAILED
    default_message = "the agent definition is invalid"


class ModelGatewayError(KernelError):
    """The model provider failed or answered something unusable (retryable)."""

    default_code = ErrorCode.MODEL_GATEWAY_FAILED
    default_message = "the model gateway failed"
    default_retryable = True


class TurnTimeoutError(KernelError):
    """A turn ran past its deadline; it may have committed: deliver the same turn id again."""

    default_code = ErrorCode.TURN_TIMEOUT
    default_message = (
        "the turn did not finish before its deadline; it may have committed: "
        "deliver the same turn id again to learn the outcome"
    )
    default_retryable = True


class FlowControlError(KernelError):
    """A model call was not made: a budget is used up (``BUDGET_EXCEEDED``; ``context`` names
    the budget, its key and when its window ends) or no slot of the provider came before the
    turn's deadline (``PROVIDER_BUSY``). Nothing of the turn was written; steps that already
    ran keep their receipts, so asking again later replays them."""

    default_code = ErrorCode.BUDGET_EXCEEDED
    default_message = (
        "the model budget is used up: nothing more was done this turn; ask again once the"
        " budget's window has passed or an operator has raised its limit"
    )
    default_retryable = True
