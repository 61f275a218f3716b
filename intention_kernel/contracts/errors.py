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
    └── TurnTimeoutError             a turn ran past its deadline; it may have committed
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # receipts.py imports this module (through ids): no runtime import back
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


class ErrorCode(StrEnum):
    """Stable machine-readable error codes. Never renamed once released."""

    INVALID_INPUT = "INVALID_INPUT"
    INVALID_THREAD_ID = "INVALID_THREAD_ID"
    INVALID_TURN_ID = "INVALID_TURN_ID"
    INVALID_IDEMPOTENCY_KEY = "INVALID_IDEMPOTENCY_KEY"
    INVALID_CAPABILITY_ID = "INVALID_CAPABILITY_ID"
    INVALID_STEP_ID = "INVALID_STEP_ID"
    INVALID_ID = "INVALID_ID"
    NOT_SERIALIZABLE = "NOT_SERIALIZABLE"
    NON_FINITE_NUMBER = "NON_FINITE_NUMBER"
    VALUE_TOO_DEEP = "VALUE_TOO_DEEP"
    INTEGER_OUT_OF_RANGE = "INTEGER_OUT_OF_RANGE"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    INVALID_JSON = "INVALID_JSON"
    SCHEMA_VALIDATION_FAILED = "SCHEMA_VALIDATION_FAILED"
    INVALID_TEXT = "INVALID_TEXT"
    INVALID_SELECTION = "INVALID_SELECTION"
    DUPLICATE_EVENT = "DUPLICATE_EVENT"

    INVALID_CONFIGURATION = "INVALID_CONFIGURATION"

    SCOPE_CLOSED = "SCOPE_CLOSED"
    EFFECT_NESTED = "EFFECT_NESTED"
    EFFECT_IN_PROGRESS = "EFFECT_IN_PROGRESS"
    TURN_RESULT_MISMATCH = "TURN_RESULT_MISMATCH"
    NOT_SUPPORTED = "NOT_SUPPORTED"

    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    STORE_BUSY = "STORE_BUSY"
    STORE_FULL = "STORE_FULL"
    STORE_READ_ONLY = "STORE_READ_ONLY"
    STORE_ERROR = "STORE_ERROR"
    LOCK_TIMEOUT = "LOCK_TIMEOUT"
    LEASE_LOST = "LEASE_LOST"
    TURN_ID_REUSED = "TURN_ID_REUSED"
    TURN_ALREADY_COMMITTED = "TURN_ALREADY_COMMITTED"
    TURN_EXPIRED = "TURN_EXPIRED"
    CHECKPOINT_REVISION_CONFLICT = "CHECKPOINT_REVISION_CONFLICT"
    CHECKPOINT_CORRUPT = "CHECKPOINT_CORRUPT"
    STORE_SCHEMA_MISSING = "STORE_SCHEMA_MISSING"
    STORE_SCHEMA_TOO_NEW = "STORE_SCHEMA_TOO_NEW"

    EFFECT_UNCERTAIN = "EFFECT_UNCERTAIN"
    EFFECT_VALUE_NOT_STORABLE = "EFFECT_VALUE_NOT_STORABLE"
    EFFECT_NOT_APPLIED = "EFFECT_NOT_APPLIED"
    IDEMPOTENCY_KEY_COLLISION = "IDEMPOTENCY_KEY_COLLISION"
    EFFECT_REQUEST_MISMATCH = "EFFECT_REQUEST_MISMATCH"
    RECEIPT_NOT_FOUND = "RECEIPT_NOT_FOUND"
    RECEIPT_NOT_UNCERTAIN = "RECEIPT_NOT_UNCERTAIN"
    RECEIPT_NOT_RECONCILED = "RECEIPT_NOT_RECONCILED"
    EFFECT_NOT_ALLOWED = "EFFECT_NOT_ALLOWED"
    CONFIRMATION_REQUIRED = "CONFIRMATION_REQUIRED"

    INTERACTION_NOT_ACTIVE = "INTERACTION_NOT_ACTIVE"
    INTERACTION_OPTION_UNKNOWN = "INTERACTION_OPTION_UNKNOWN"

    CHECKPOINT_INCOMPATIBLE = "CHECKPOINT_INCOMPATIBLE"
    AGENT_COMPILATION_FAILED = "AGENT_COMPILATION_FAILED"
    MODEL_GATEWAY_FAILED = "MODEL_GATEWAY_FAILED"
    MODEL_OUTPUT_INVALID = "MODEL_OUTPUT_INVALID"
    CAPABILITY_OUTPUT_INVALID = "CAPABILITY_OUTPUT_INVALID"
    TURN_TIMEOUT = "TURN_TIMEOUT"

    INVALID_SINK_URL = "INVALID_SINK_URL"
    SINK_UNAVAILABLE = "SINK_UNAVAILABLE"
    SINK_FAILED = "SINK_FAILED"
    SINK_REJECTED = "SINK_REJECTED"


class KernelError(Exception):
    """Root of every error raised by intention-kernel.

    ``context`` holds JSON-safe details (ids, limits, sizes) that help an operator; it never
    holds payload values. Subclasses fix a default ``code`` and ``retryable``.
    """

    default_code: ClassVar[ErrorCode] = ErrorCode.INVALID_INPUT
    default_message: ClassVar[str] = "intention-kernel error"
    default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str | None = None,
        *,
        code: ErrorCode | None = None,
        retryable: bool | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        self.code: ErrorCode = code or self.default_code
        self.message: str = message or self.default_message
        self.retryable: bool = self.default_retryable if retryable is None else retryable
        self.context: dict[str, Any] = dict(context or {})
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!s}, message={self.message!r})"

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe description for APIs and logs; the private cause is never included."""
        return {
            "error": type(self).__name__,
            "code": str(self.code),
            "message": self.message,
            "retryable": self.retryable,
            "context": self.context,
        }


class InvalidInputError(KernelError):
    """Bad input crossing a public entry point; nothing was written."""

    default_code = ErrorCode.INVALID_INPUT
    default_message = "invalid input"


class InvalidIdError(InvalidInputError):
    """A thread or turn id, idempotency key, capability or step id is malformed."""

    default_code = ErrorCode.INVALID_ID
    default_message = "invalid identifier"


class SerializationError(InvalidInputError):
    """A value cannot be stored as JSON exactly: not JSON, NaN/Infinity, an integer out of
    range, too deep, too large (``contracts.codec``); ``context["path"]`` names the part."""

    default_code = ErrorCode.NOT_SERIALIZABLE
    default_message = "value is not storable as JSON"


class SchemaValidationError(InvalidInputError):
    """A value does not match its declared schema."""

    default_code = ErrorCode.SCHEMA_VALIDATION_FAILED
    default_message = "value does not match its schema"


class ConfigurationError(KernelError):
    """Invalid settings, refused at start rather than at the first turn."""

    default_code = ErrorCode.INVALID_CONFIGURATION
    default_message = "invalid configuration"


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
