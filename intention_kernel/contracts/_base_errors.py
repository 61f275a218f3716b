"""The error codes, the root error and the errors the lowest contracts raise.

Why apart from ``errors``: ``codec`` and ``ids`` raise these, and ``receipts`` is built on
them, while ``errors`` types ``EffectUncertainError.receipt`` with ``receipts``. Every class here
is presented (``__module__``, ``error.type``) and documented as ``contracts.errors``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

__all__ = [
    "ConfigurationError",
    "ErrorCode",
    "InvalidIdError",
    "InvalidInputError",
    "KernelError",
    "SerializationError",
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
    INVALID_DEPS = "INVALID_DEPS"
    INVALID_SCHEDULE = "INVALID_SCHEDULE"

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
    INTERACTION_EXPIRED = "INTERACTION_EXPIRED"
    EXTERNAL_UNKNOWN = "EXTERNAL_UNKNOWN"
    EXTERNAL_EXPIRED = "EXTERNAL_EXPIRED"
    EXTERNAL_TOKEN_INVALID = "EXTERNAL_TOKEN_INVALID"
    EDIT_INVALID = "EDIT_INVALID"
    EDIT_NOT_ALLOWED = "EDIT_NOT_ALLOWED"

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

    THREAD_BUSY = "THREAD_BUSY"
    REQUEST_NOT_FOUND = "REQUEST_NOT_FOUND"
    REQUEST_STATE_CONFLICT = "REQUEST_STATE_CONFLICT"
    REQUEST_DEAD = "REQUEST_DEAD"
    INVALID_CURSOR = "INVALID_CURSOR"

    MCP_SERVER_UNAVAILABLE = "MCP_SERVER_UNAVAILABLE"
    MCP_TOOL_INVALID = "MCP_TOOL_INVALID"
    MCP_RESULT_INVALID = "MCP_RESULT_INVALID"
    MCP_CALL_REFUSED = "MCP_CALL_REFUSED"

    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    BUDGET_KEY_FAILED = "BUDGET_KEY_FAILED"
    PROVIDER_BUSY = "PROVIDER_BUSY"


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


class ConfigurationError(KernelError):
    """Invalid settings, refused at start rather than at the first turn."""

    default_code = ErrorCode.INVALID_CONFIGURATION
    default_message = "invalid configuration"
