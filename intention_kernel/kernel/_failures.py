"""How an exception a capability raised is reported: a failed step, never a crashed turn.

Why: an exception from a capability (a backend that is down, a bug, a write the ledger refuses)
says nothing about the turn's durability, so the turn still commits an honest answer in the
kernel's words and the thread goes on. What the user and the event are told is decided here:
whether asking again may help (``retryable``), a stable ``code`` when one is known, and the
exception's qualified type name. Never its message: it may hold secrets (a connection string,
a token, a customer's data).

What is *not* a step's failure stays an error of the turn (``must_propagate``): a store that
fails or a lost lease (``DurabilityError``: the turn cannot commit, the durability promises
decide), the turn's own deadline or a cancellation (``asyncio.CancelledError`` is not an
``Exception``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..contracts.errors import (
    DurabilityError,
    EffectConflictError,
    ErrorCode,
    KernelError,
    TurnTimeoutError,
)

__all__ = ["ErrorClassifier", "StepError", "default_step_error"]

logger = logging.getLogger("intention_kernel.kernel")

_CODE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]{0,63}$")

CONFLICT = "this conflicts with an earlier operation under the same key"
"""A write whose key was used before for another request (``EFFECT_REQUEST_MISMATCH``)."""
KEY_TAKEN = "this conflicts with an earlier operation of another kind under the same key"
"""A write whose key is bound to another capability (``IDEMPOTENCY_KEY_COLLISION``)."""
TRY_AGAIN = "it could not be done right now; please try again"
"""A step that failed with an error worth retrying (a backend unreachable, a timeout)."""
INTERNAL = "it failed because of an internal error"
"""A step that failed with an error that asking again will not change."""

_REASONS = {
    ErrorCode.EFFECT_REQUEST_MISMATCH: CONFLICT,
    ErrorCode.IDEMPOTENCY_KEY_COLLISION: KEY_TAKEN,
}


@dataclass(frozen=True, slots=True)
class StepError:
    """How a step's exception is reported: whether asking again may help (``retryable``) and
    an optional stable ``code`` for operators (a letter, then up to 63 letters, digits or
    ``_.:-``). The user is told the kernel's words for ``retryable``; the exception's message
    is never shown or stored."""

    retryable: bool
    code: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.retryable, bool):
            raise TypeError("StepError.retryable must be a bool")
        if self.code is not None and (not isinstance(self.code, str) or not _CODE.match(self.code)):
            raise ValueError("StepError.code must be a short identifier")


ErrorClassifier = Callable[[Exception], StepError | None]
"""The host's mapping (``Kernel(classify_error=...)``) from an exception a capability raised
to a ``StepError``; ``None`` leaves it to ``default_step_error``."""


def default_step_error(exc: Exception) -> StepError:
    """The kernel's classification: a ``KernelError`` keeps its own ``code`` and
    ``retryable``; an ``OSError`` (``ConnectionError`` included) or a ``TimeoutError`` is
    retryable; anything else is not. An ``ExceptionGroup`` is retryable when all it holds is."""
    if isinstance(exc, KernelError):
        return StepError(retryable=exc.retryable, code=str(exc.code))
    if isinstance(exc, ExceptionGroup):
        return StepError(retryable=all(default_step_error(e).retryable for e in exc.exceptions))
    return StepError(retryable=isinstance(exc, (OSError, TimeoutError)))


def _of_the_turn(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return any(_of_the_turn(e) for e in exc.exceptions)
    return not isinstance(exc, Exception) or isinstance(exc, (DurabilityError, TurnTimeoutError))


def _hides_cancellation(exc: BaseException) -> bool:
    """Raised while handling a cancellation (``except CancelledError: raise Other()``)."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen and len(seen) < 64:
        if isinstance(found, asyncio.CancelledError):
            return True
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return False


def must_propagate(exc: BaseException, *, cancel_pending: bool) -> bool:
    """An error of the turn, not of its step: the store, the turn's deadline, a cancellation,
    or a group (a capability's own task group) holding one of them. Also a cancellation a
    capability turned into another exception (``except CancelledError: raise Other()``): it
    ends the turn as before. ``cancel_pending`` says that a cancellation of the step's task
    arrived while the capability ran and is still pending.

    Why both signals: a capability's own timeout that it turns into its own error carries a
    ``CancelledError`` in its chain too, but its cancellation was taken back; and on Python
    3.11 a task group whose children failed leaves its parent's cancellation count raised,
    with no ``CancelledError`` in the group's chain.
    """
    return _of_the_turn(exc) or (cancel_pending and _hides_cancellation(exc))


def type_name(exc: BaseException) -> str:
    """The exception's qualified class name (``builtins.ConnectionError``): never its text."""
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"[:200]


def classify(exc: Exception, host: ErrorClassifier | None) -> StepError:
    """``host``'s answer for ``exc``, or the default when it has none or cannot give one."""
    if host is not None:
        try:
            found = host(exc)
        except Exception as failure:  # a broken classifier must not crash the turn either
            logger.warning(
                "classify_error raised %s for %s; using the default classification",
                type_name(failure),
                type_name(exc),
            )
            found = None
        if isinstance(found, StepError):
            return found
        if found is not None:
            logger.warning(
                "classify_error returned %s for %s, not a StepError or None; using the default",
                type(found).__name__,
                type_name(exc),
            )
    return default_step_error(exc)


def reason_for(exc: Exception, error: StepError) -> str:
    """What the user is told, in the kernel's words."""
    if isinstance(exc, EffectConflictError):
        reason = _REASONS.get(exc.code)
        if reason is not None:
            return reason
    return TRY_AGAIN if error.retryable else INTERNAL
